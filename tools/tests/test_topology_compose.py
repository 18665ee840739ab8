"""Rendered compose files against the real Docker Compose: `config` for every shipped topology, and
`up` of the PD topology with a stand-in image (a test double for the simulator and router images)."""

import json
import shutil
import socket
import subprocess
import time
import urllib.request
import uuid
from pathlib import Path

import pytest
import yaml

from sglnode.topology import RenderOptions, read_topology_file, render, validate

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]
SHIPPED = sorted((REPO / "inventory" / "topologies").glob("*.yml"))
STANDIN_DIR = Path(__file__).parent / "fixtures" / "topology" / "standin"
STANDIN_IMAGE = "sglnode/test-standin:topology"
COMPOSE_TIMEOUT_S = 120
UP_WAIT_S = 90


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
    topology, problems = validate(read_topology_file(path))
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


def free_ports(count):
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


@pytest.fixture(scope="module")
def standin_image():
    build = subprocess.run(
        ["docker", "build", "-q", "-t", STANDIN_IMAGE, str(STANDIN_DIR)],
        check=False,
        capture_output=True,
        text=True,
        timeout=300,
    )
    if build.returncode != 0:
        pytest.skip(f"cannot build the stand-in image: {build.stderr[-500:]}")
    return STANDIN_IMAGE


def get_json(url):
    with urllib.request.urlopen(url, timeout=5) as response:
        return json.load(response)


@pytest.mark.slow
def test_pd_topology_comes_up_wired_with_stand_in_images(standin_image, tmp_path):
    data = read_topology_file(REPO / "inventory" / "topologies" / "pd-1p1d.yml")
    prefill_port, decode_port, router_port, prometheus_port = free_ports(4)
    data["name"] = f"wiring-{uuid.uuid4().hex[:8]}"
    data["servers"][0]["port"], data["servers"][1]["port"] = prefill_port, decode_port
    data["router"].update(port=router_port, prometheus_port=prometheus_port)
    topology, problems = validate(data)
    assert problems == []
    options = RenderOptions(runtime="sim", sim_image=standin_image, router_image=standin_image)
    root = write(render(topology, options), tmp_path)
    directory = root / "etc" / "sglang" / topology.name
    # Test-only override: the router stand-in probes often too.
    (directory / "compose.test.yaml").write_text(
        yaml.safe_dump({"services": {"router": {"healthcheck": {"interval": "2s"}}}})
    )
    files = ["-f", "compose.yaml", "-f", "compose.sim.yaml", "-f", "compose.test.yaml"]
    project = ["docker", "compose", "-p", topology.name, *files]
    try:
        up = subprocess.run(
            [*project, "up", "--detach", "--wait", "--pull", "never"],
            cwd=directory,
            check=False,
            capture_output=True,
            text=True,
            timeout=UP_WAIT_S + COMPOSE_TIMEOUT_S,
        )
        assert up.returncode == 0, up.stderr[-2000:]
        deadline = time.monotonic() + UP_WAIT_S
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{router_port}/health", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, "router never saw both servers healthy"
                time.sleep(1)
        prefill = get_json(f"http://127.0.0.1:{prefill_port}/argv")
        assert prefill["env"]["NCCL_ALGO"] == "Ring"  # env_file reached the container
        assert prefill["env"]["SGLNODE_SIM_MODEL"] == "deepseek-v4-flash-fp4"
        assert prefill["argv"][:3] == ["python3", "-m", "sglang.launch_server"]
        assert "--disaggregation-mode" in prefill["argv"]
        router = get_json(f"http://127.0.0.1:{router_port}/argv")
        assert f"http://prefill0:{prefill_port}" in router["argv"]
        ports = subprocess.run(
            [*project, "port", "prefill0", str(prefill_port)],
            cwd=directory,
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert ports.stdout.strip() == f"127.0.0.1:{prefill_port}"
    finally:
        subprocess.run(
            [*project, "down", "--timeout", "5"],
            cwd=directory,
            check=False,
            capture_output=True,
            timeout=COMPOSE_TIMEOUT_S,
        )


def image_present(ref):
    probe = subprocess.run(["docker", "image", "inspect", ref], check=False, capture_output=True, timeout=30)
    return probe.returncode == 0


@pytest.mark.slow
def test_pd_topology_serves_through_the_real_router_and_the_simulator(tmp_path):
    options = RenderOptions(runtime="sim")
    missing = [ref for ref in (options.sim_image, options.router_image) if not image_present(ref)]
    if missing:
        pytest.skip(f"images not built here: {missing} (images/sim/build.sh, images/router/build.sh)")
    data = read_topology_file(REPO / "inventory" / "topologies" / "pd-1p1d.yml")
    prefill_port, bootstrap_port, decode_port, router_port, prometheus_port = free_ports(5)
    data["name"] = f"simup-{uuid.uuid4().hex[:8]}"
    data["servers"][0].update(port=prefill_port, bootstrap_port=bootstrap_port)
    data["servers"][1]["port"] = decode_port
    data["router"].update(port=router_port, prometheus_port=prometheus_port)
    topology, problems = validate(data)
    assert problems == []
    directory = write(render(topology, options), tmp_path) / "etc" / "sglang" / topology.name
    project = ["docker", "compose", "-p", topology.name, "-f", "compose.yaml", "-f", "compose.sim.yaml"]
    try:
        up = subprocess.run(
            [*project, "up", "--detach", "--wait", "--pull", "never"],
            cwd=directory,
            check=False,
            capture_output=True,
            text=True,
            timeout=UP_WAIT_S + COMPOSE_TIMEOUT_S,
        )
        assert up.returncode == 0, up.stderr[-2000:]
        request = urllib.request.Request(
            f"http://127.0.0.1:{router_port}/v1/chat/completions",
            data=json.dumps(
                {
                    "model": "deepseek-v4-flash",
                    "messages": [{"role": "user", "content": "hi"}],
                    "max_tokens": 4,
                }
            ).encode(),
            headers={"Content-Type": "application/json"},
        )
        # The simulator's answer (a test double, not SGLang) came through the PD router.
        with urllib.request.urlopen(request, timeout=60) as response:
            body = json.load(response)
        assert body["simulated"] is True
        assert body["usage"]["completion_tokens"] == 4
    finally:
        subprocess.run(
            [*project, "down", "--timeout", "5"],
            cwd=directory,
            check=False,
            capture_output=True,
            timeout=COMPOSE_TIMEOUT_S,
        )
