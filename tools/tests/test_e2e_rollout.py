"""End to end on the simulated node: the PD topology comes up with docker compose (simulator workers,
a test double of SGLang, and the real sglang-router), `sglnode validate` waits for every server and
runs a bounded benchmark through the router, then an injected crash is diagnosed, then teardown.

Every figure here is the simulator's; the assertions are about wiring and honesty, not speed.
"""

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml
from docker_available import free_ports, image_present

from sglnode.topology import RenderOptions, check_topology, read_topology_file, render

REPO = Path(__file__).resolve().parents[2]
COMPOSE_TIMEOUT_S = 120
VALIDATE_TIMEOUT_S = 300

pytestmark = [pytest.mark.docker, pytest.mark.slow]


@pytest.fixture
def pd_stack(tmp_path):
    options = RenderOptions(runtime="sim")
    missing = [ref for ref in (options.sim_image, options.router_image) if not image_present(ref)]
    if missing:
        pytest.skip(f"images not built: {missing} (make setup builds them)")
    data = read_topology_file(REPO / "inventory" / "topologies" / "pd-1p1d.yml")
    prefill, bootstrap, decode, router, prometheus = free_ports(5)
    data["name"] = f"e2e-{uuid.uuid4().hex[:8]}"
    data["servers"][0].update(port=prefill, bootstrap_port=bootstrap)
    data["servers"][1]["port"] = decode
    data["router"].update(port=router, prometheus_port=prometheus)
    topology, problems = check_topology(data)
    assert problems == []
    for item in render(topology, options):
        path = tmp_path / item.path.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(item.content)
    topology_file = tmp_path / "topology.yml"
    topology_file.write_text(yaml.safe_dump(data))
    directory = tmp_path / "etc" / "sglang" / topology.name
    compose = ["docker", "compose", "-f", "compose.yaml", "-f", "compose.sim.yaml"]
    up = subprocess.run(
        [*compose, "up", "--detach", "--pull", "never"],
        cwd=directory, capture_output=True, text=True, timeout=COMPOSE_TIMEOUT_S, check=False,
    )  # fmt: skip
    try:
        assert up.returncode == 0, up.stderr[-2000:]
        yield {
            "file": topology_file,
            "dir": directory,
            "compose": compose,
            "decode_port": decode,
            "tmp": tmp_path,
        }
    finally:
        subprocess.run(
            [*compose, "down", "--timeout", "2"],
            cwd=directory,
            capture_output=True,
            timeout=COMPOSE_TIMEOUT_S,
            check=False,
        )


def _sglnode(*args, timeout=VALIDATE_TIMEOUT_S):
    return subprocess.run(
        [sys.executable, "-m", "sglnode", *args], capture_output=True, text=True, timeout=timeout, check=False
    )


def test_pd_rollout_is_ready_benchmarked_and_a_crash_is_diagnosed(pd_stack):
    reports = pd_stack["tmp"] / "reports"
    validate_run = _sglnode(
        "validate", str(pd_stack["file"]),
        "--compose-dir", str(pd_stack["dir"]), "--report-dir", str(reports),
        "--timeout", "120", "--simulated", "--concurrency", "1,4", "--num-requests", "8", "--duration", "15",
        "--input-len", "64", "--output-len", "16", "--max-error-rate", "0",
    )  # fmt: skip
    assert validate_run.returncode == 0, validate_run.stdout[-3000:] + validate_run.stderr[-2000:]

    report = json.loads((reports / "report.json").read_text())
    assert [w["server"] for w in report["waits"]] == ["prefill0", "decode0", "router"]
    assert all(w["result"]["outcome"] == "ready" for w in report["waits"])
    assert report["waits"][-1]["pd"] is True  # readiness through the router is a real PD generation
    bench = json.loads((reports / "bench.json").read_text())
    assert bench["target"]["simulated"] is True
    assert [stage["concurrency"] for stage in bench["stages"]] == [1, 4]
    for stage in bench["stages"]:
        assert stage["requests"]["errors"] == 0
        assert stage["requests"]["ok"] > 0
        # 16 tokens asked for, ignore_eos: the server's own counts, exact.
        assert stage["tokens"]["mean_output_tokens"] == 16
    assert stage["roofline"] is not None  # compared with the planner's decode roofline
    assert "SIMULATED" in (reports / "report.md").read_text()
    assert (reports / "bench.png").stat().st_size > 0

    # Inject a CUDA-graph OOM into the decode server and recreate it: wait must name cause and phase.
    fault = pd_stack["dir"] / "compose.fault.yaml"
    fault.write_text(
        yaml.safe_dump({"services": {"decode0": {"environment": {"SGLNODE_SIM_FAULT": "oom:cuda_graph"}}}})
    )
    compose = [*pd_stack["compose"], "-f", "compose.fault.yaml"]
    recreate = subprocess.run(
        [*compose, "up", "--detach", "--pull", "never", "decode0"],
        cwd=pd_stack["dir"], capture_output=True, text=True, timeout=COMPOSE_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert recreate.returncode == 0, recreate.stderr[-2000:]
    waited = _sglnode(
        "wait", "--url", f"http://127.0.0.1:{pd_stack['decode_port']}",
        "--compose-file", str(pd_stack["dir"] / "compose.yaml"), "--service", "decode0",
        "--timeout", "120", "--json",
    )  # fmt: skip
    assert waited.returncode == 2, waited.stdout[-2000:] + waited.stderr[-2000:]
    result = json.loads(waited.stdout)
    assert result["outcome"] == "crashed"
    assert (result["diagnosis"]["cause"], result["diagnosis"]["phase"]) == ("oom", "cuda_graph")
    assert any("out of memory" in e["text"].lower() for e in result["diagnosis"]["evidence"])
