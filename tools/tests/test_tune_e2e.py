"""The sweep end to end on the simulated node (servers are `sglnode sim`, a TEST DOUBLE of SGLang):
two candidates deployed with docker compose, one ready and benchmarked, one dying at startup in
KV-cache allocation as SGLang 0.5.23 does; both torn down, nothing left behind, every figure SIMULATED."""

import io
import json
import subprocess
import uuid

import pytest
import yaml
from docker_available import free_ports, image_present
from tune_helpers import DEMO

from sglnode.topology.render import RenderOptions
from sglnode.tune.campaign import run_campaign

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_tiny_sweep_on_the_simulated_node(tmp_path):
    options = RenderOptions(runtime="sim")
    missing = [ref for ref in (options.sim_image, options.router_image) if not image_present(ref)]
    if missing:
        pytest.skip(f"images not built: {missing} (make setup builds them)")
    topology = yaml.safe_load((DEMO / "tp4.yml").read_text())
    server, router, prometheus = free_ports(3)
    topology["servers"][0]["port"] = server
    topology["router"].update(port=router, prometheus_port=prometheus)
    (tmp_path / "tp4.yml").write_text(yaml.safe_dump(topology))
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    spec = {
        "name": name,
        "base": "tp4.yml",
        "runtime": "sim",
        "axes": {"mem_fraction_static": [0.35]},
        "memory_preflight": "warn",
        "bench": {"concurrency": [1, 2], "num_requests": 4, "duration_s": 10, "input_len": 32,
                  "output_len": 8, "warmup": 1},
        "slo": {"max_itl_p99_ms": 1000},
        "budget": {"candidate_s": 120, "startup_s": 60, "teardown_s": 30},
        "sim": {"time_scale": 0.2, "startup_s": 0.5},
    }  # fmt: skip
    (tmp_path / "sweep.yml").write_text(yaml.safe_dump(spec))
    out = io.StringIO()
    code, results = run_campaign(tmp_path / "sweep.yml", tmp_path / "out", stdout=out)
    text = out.getvalue()
    assert code == 0, text[-4000:]
    by_label = {c["label"]: c for c in results["candidates"]}
    base, starved = by_label["base"], by_label["mem=0.35"]
    assert base["status"] == "done"
    assert [s["concurrency"] for s in base["stages"]] == [1, 2]
    assert all(s["requests_ok"] == 4 and s["mean_output_tokens"] == 8 for s in base["stages"])
    assert base["simulated"] is True
    assert starved["status"] == "crashed"
    assert starved["wait"]["diagnosis"]["phase"] == "kv_cache"
    assert any("Loaded weights leave no GPU memory" in e for e in starved["wait"]["diagnosis"]["evidence"])
    assert results["winner"]["id"] == base["id"]
    assert "SIMULATED" in text and "<- winner" in text
    assert (tmp_path / "out" / "winner.yml").read_text().startswith("# SIMULATED")
    assert json.loads((tmp_path / "out" / "winner.json").read_text())["simulated"] is True
    assert (tmp_path / "out" / "results.png").stat().st_size > 0
    assert base["leaks"] == [] and starved["leaks"] == []
    left = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"label=io.sglnode.tune.sweep={name}"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert left.stdout.strip() == ""
