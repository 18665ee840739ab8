"""nccl_env + sglang_serve on the simulated node: they write exactly what `sglnode topology render`
writes, run idempotently, and a bad topology (or one that does not fit in memory) changes nothing."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sglnode.cli import main

REPO = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(__file__).parent / "fixtures" / "topology" / "roles" / "sim-rollout.yml"
TOPOLOGIES = REPO / "inventory" / "topologies"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
PLAYBOOK_TIMEOUT_S = 300

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not ANSIBLE_PLAYBOOK.exists(), reason="ansible-playbook not in the venv"),
]


def rollout(topology_file, prefix, **extra):
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1"}
    extra_vars = {"sglang_topology_file": str(topology_file), "node_prefix": str(prefix), **extra}
    args = [str(ANSIBLE_PLAYBOOK), "-i", "localhost,", str(PLAYBOOK), "-e", json.dumps(extra_vars)]
    return subprocess.run(
        args, cwd=REPO, env=env, check=False, capture_output=True, text=True, timeout=PLAYBOOK_TIMEOUT_S
    )


def changed_count(output):
    return int(re.search(r"localhost\s+: ok=\d+\s+changed=(\d+)", output).group(1))


def snapshot(root):
    return {
        str(p.relative_to(root)): (p.read_bytes(), p.stat().st_mode, p.stat().st_mtime_ns)
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


@pytest.fixture(scope="module")
def pd_rollout(tmp_path_factory):
    prefix = tmp_path_factory.mktemp("node")
    first = rollout(TOPOLOGIES / "pd-1p1d.yml", prefix)
    assert first.returncode == 0, first.stdout[-3000:]
    return prefix, first


def test_roles_write_byte_for_byte_what_the_cli_renders(pd_rollout, tmp_path):
    prefix, _ = pd_rollout
    cli = tmp_path / "cli"
    argv = ["topology", "render", str(TOPOLOGIES / "pd-1p1d.yml"), "--out", str(cli), "--runtime", "sim"]
    assert main([*argv, "--prefix", str(prefix)]) == 0
    rolled = {k: (v[0], v[1] & 0o777) for k, v in snapshot(prefix).items()}
    rendered = {k: (v[0], v[1] & 0o777) for k, v in snapshot(cli).items()}
    # The CLI's manifest of what it rendered (to tell hand edits apart) is not a node file.
    assert rendered.pop(".sglnode-render.json")
    assert rolled == rendered


def test_second_rollout_changes_nothing(pd_rollout):
    prefix, _ = pd_rollout
    again = rollout(TOPOLOGIES / "pd-1p1d.yml", prefix)
    assert again.returncode == 0, again.stdout[-3000:]
    assert changed_count(again.stdout) == 0


def test_unit_was_verified_on_the_simulated_node(pd_rollout):
    _, first = pd_rollout
    if shutil.which("systemd-analyze"):
        assert "Unit is verified by systemd-analyze" in first.stdout
    assert "Topology unit is enabled" not in first.stdout  # no systemd on the simulated node


@pytest.mark.parametrize(
    ("mutation", "message"),
    [
        (
            {"servers": {1: {"gpus": [3, 4, 5, 6]}}},
            "server decode0.gpus: GPU 3 on node local is also used by prefill0",
        ),
        ({"servers": {0: {"args": {"cuda_graph_max_bs": 8}}}}, "use --cuda-graph-max-bs-decode"),
        (
            {"servers": {1: {"tp": 1, "gpus": [4]}}},
            r"server decode0.mem_fraction_static: does not fit in memory \(weights\)",
        ),
    ],
    ids=["gpu-clash", "removed-flag", "memory-preflight"],
)
def test_bad_topology_changes_no_file_on_the_node(pd_rollout, tmp_path, mutation, message):
    prefix, _ = pd_rollout
    data = yaml.safe_load((TOPOLOGIES / "pd-1p1d.yml").read_text())
    for index, fields in mutation["servers"].items():
        data["servers"][index].update(fields)
    bad = tmp_path / "pd-1p1d.yml"
    bad.write_text(yaml.safe_dump(data))
    before = snapshot(prefix)
    result = rollout(bad, prefix)
    assert result.returncode != 0
    assert re.search(message, result.stdout), result.stdout[-3000:]
    assert "nothing was changed" in result.stdout
    assert snapshot(prefix) == before


def test_p2p_unsafe_node_gets_the_fallback(tmp_path):
    result = rollout(TOPOLOGIES / "tp8.yml", tmp_path, gpu_node={"p2p_safe": False})
    assert result.returncode == 0, result.stdout[-3000:]
    env = (tmp_path / "etc/sglang/tp8/tp8.env").read_text()
    assert "\nNCCL_P2P_DISABLE=1\n" in env and "NCCL_P2P_LEVEL" not in env
    assert "--disable-custom-all-reduce" in (tmp_path / "etc/sglang/tp8/compose.yaml").read_text()
