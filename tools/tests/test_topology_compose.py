"""Rendered compose files against the real Docker Compose: `config` for every shipped topology and
node, real and simulated runtime. `up` of the PD topology with the simulator and the real router is
test_e2e_rollout.py."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from sglnode.topology import RenderOptions, check_topology, read_topology_file, render

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "inventory" / "topologies").glob("*.yml"))
COMPOSE_TIMEOUT_S = 120


def docker_ready():
    if not shutil.which("docker"):
        return False
    probe = subprocess.run(["docker", "compose", "version"], check=False, capture_output=True, timeout=30)
    return probe.returncode == 0


if not docker_ready():
    pytest.skip("docker compose not available", allow_module_level=True)


def write(files, root):
    for f in files:
        target = root / f.path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(f.content)
    return root


def compose_config(directory, *files):
    args = ["docker", "compose"] + [a for f in files for a in ("-f", f)] + ["config", "-q"]
    return subprocess.run(
        args, cwd=directory, check=False, capture_output=True, text=True, timeout=COMPOSE_TIMEOUT_S
    )


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_compose_config_accepts_real_and_sim_for_every_node(path, tmp_path):
    topology, problems = check_topology(read_topology_file(path))
    assert problems == []
    for node in topology.node_names:
        root = write(render(topology, RenderOptions(node=node, api_key=True)), tmp_path / node)
        directory = root / "etc" / "sglang" / topology.name
        # The API key files are secrets the role writes; stand-ins so compose can resolve env_file.
        (directory / "api-key.env").write_text("SGLANG_API_KEY=test\n")
        (directory / "api-key.yaml").write_text("api-key: test\n")
        for files in (["compose.yaml"], ["compose.yaml", "compose.sim.yaml"]):
            result = compose_config(directory, *files)
            assert result.returncode == 0, result.stderr


def test_compose_config_check_rejects_a_broken_file(tmp_path):
    # Control: compose config does fail on bad input, so the test above can fail.
    (tmp_path / "compose.yaml").write_text("services:\n  x:\n    image: a\n    ports: [{bad: 1}]\n")
    assert compose_config(tmp_path, "compose.yaml").returncode != 0


def test_simulated_runtime_drops_gpus_host_ipc_and_memlock_but_keeps_the_command(tmp_path):
    topology, problems = check_topology(read_topology_file(REPO / "inventory" / "topologies" / "pd-1p1d.yml"))
    assert problems == []
    root = write(render(topology, RenderOptions(runtime="sim")), tmp_path)
    directory = root / "etc" / "sglang" / topology.name
    args = ["docker", "compose", "-f", "compose.yaml", "-f", "compose.sim.yaml", "config", "--format", "json"]
    merged = subprocess.run(
        args, cwd=directory, check=True, capture_output=True, text=True, timeout=COMPOSE_TIMEOUT_S
    )
    services = json.loads(merged.stdout)["services"]
    real = json.loads(
        subprocess.run(
            ["docker", "compose", "-f", "compose.yaml", "config", "--format", "json"],
            cwd=directory, check=True, capture_output=True, text=True, timeout=COMPOSE_TIMEOUT_S,
        ).stdout
    )["services"]  # fmt: skip
    for name in ("prefill0", "decode0"):
        assert real[name]["ipc"] == "host"  # the real servers need it for NCCL's shared memory
        sim = services[name]
        assert "ipc" not in sim and "deploy" not in sim and "ulimits" not in sim
        assert sim["image"].startswith("sglnode/sim:")
        assert sim["entrypoint"] == ["sglnode", "sim"]
        assert sim["command"] == real[name]["command"]  # the simulator gets SGLang's own flags
