"""sglnode.rollout: the readiness timeline, the roofline the bench is held to, and the report."""

import json
from pathlib import Path

import pytest

from sglnode.planning.planner import plan_server
from sglnode.rollout import aggregate_plan, render_report, startup_timeline, targets_from_settings
from sglnode.topology import check_topology, read_topology_file
from sglnode.topology.memory import topology_model

TOPOLOGIES = Path(__file__).resolve().parents[2] / "inventory" / "topologies"
GPU = "rtx-pro-6000-blackwell"


def _topology(name):
    topology, problems = check_topology(read_topology_file(TOPOLOGIES / f"{name}.yml"))
    assert problems == []
    return topology


def test_timeline_uses_the_logs_own_timestamps_and_the_first_line_of_each_stage():
    # A wait that started late replays the log in a burst: its own elapsed times are all ~0.3 s.
    milestones = [
        {"stage": "weights", "elapsed_s": 0.3, "text": "[2026-11-29 09:30:01 TP0] Load weight begin."},
        {"stage": "kv_cache", "elapsed_s": 0.3, "text": "[2026-11-29 09:31:41 TP0] Load weight end."},
        {"stage": "kv_cache", "elapsed_s": 0.3, "text": "[2026-11-29 09:31:42 TP0] KV Cache is allocated."},
        {"stage": "ready", "elapsed_s": 0.3, "text": "[2026-11-29 09:32:10] The server is fired up"},
    ]
    assert startup_timeline(milestones) == [("weights", 0.0), ("kv_cache", 100.0), ("ready", 129.0)]


def test_timeline_falls_back_to_the_watchers_clock_without_timestamps():
    milestones = [
        {"stage": "weights", "elapsed_s": 1.0, "text": "Load weight begin."},
        {"stage": "ready", "elapsed_s": 4.5, "text": "The server is fired up and ready to roll!"},
    ]
    assert startup_timeline(milestones) == [("weights", 0.0), ("ready", 3.5)]


def test_pd_roofline_is_the_decode_servers_at_the_bench_concurrencies():
    topology = _topology("pd-1p1d")
    plan = aggregate_plan(topology, GPU, [1, 4, 16])
    decode = next(s for s in topology.servers if s.role == "decode")
    expected = plan_server(topology_model(topology), decode, GPU, concurrency=[1, 4, 16])
    assert plan["replicas_behind_router"] == 1
    assert [p["concurrency"] for p in plan["roofline"]] == [1, 4, 16]
    # The plan JSON rounds tok/s to two decimals.
    assert [p["decode_tok_s"] for p in plan["roofline"]] == pytest.approx(
        [p.decode_tok_s for p in expected.roofline], abs=0.01
    )


def test_replicas_behind_the_router_split_the_load_and_add_their_throughput():
    topology = _topology("tp4x2")
    plan = aggregate_plan(topology, GPU, [2, 16])
    replica = next(s for s in topology.servers if s.role == "regular")
    single = plan_server(topology_model(topology), replica, GPU, concurrency=[1, 8])
    assert plan["replicas_behind_router"] == 2
    assert [p["concurrency"] for p in plan["roofline"]] == [2, 16]
    assert [p["decode_tok_s"] for p in plan["roofline"]] == pytest.approx(
        [2 * p.decode_tok_s for p in single.roofline], abs=0.02
    )


def test_report_labels_simulated_figures_and_shows_a_crash_with_its_evidence():
    crashed = {
        "server": "decode0",
        "url": "http://127.0.0.1:30002",
        "exit_code": 2,
        "stderr": "",
        "result": {
            "outcome": "crashed",
            "elapsed_s": 1.3,
            "milestones": [],
            "diagnosis": {
                "cause": "oom",
                "phase": "kv_cache",
                "fix": "Raise --mem-fraction-static",
                "evidence": [{"line_no": 15, "text": "RuntimeError: Not enough memory."}],
            },
        },
    }
    text = render_report(
        {
            "topology": "pd-1p1d",
            "node": "local",
            "waits": [crashed],
            "bench": None,
            "exit_code": 2,
            "simulated": True,
        }
    )
    assert "SIMULATED" in text
    assert "cause: oom (phase kv_cache)" in text
    assert "evidence line 15: RuntimeError: Not enough memory." in text
    assert "fix: Raise --mem-fraction-static" in text
    assert "Result: exit 2" in text


def test_report_of_a_real_node_carries_no_simulation_label():
    text = render_report(
        {"topology": "tp8", "node": "local", "waits": [], "bench": None, "exit_code": 0, "simulated": False}
    )
    assert "SIMULATED" not in text


def test_targets_as_the_role_sends_them_are_per_concurrency():
    # Ansible's to_json turns the mapping's integer keys into strings.
    targets = targets_from_settings(
        json.loads('{"max_error_rate": 0.0, "min_output_tok_s": {"1": 100, "4": 300, "16": 600}}')
    )
    assert targets.min_output_tok_s == {1.0: 100.0, 4.0: 300.0, 16.0: 600.0}
    for bad in ({"min_output_tok_s": "nan"}, {"max_error_rate": 2}, {"min_tok_s": 1}):
        with pytest.raises(ValueError):
            targets_from_settings(bad)
