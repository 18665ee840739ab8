"""The sweep engine with a fake deployer: order, crash handling, budgets, signals, resume, leaks."""

import io
import json
import signal

import pytest
from tune_helpers import FakeClock, FakeDeployer, write_spec

from sglnode.tune.campaign import plan_candidates, run_campaign
from sglnode.tune.spec import load_spec
from sglnode.tune.sweep import Sweep


def _labelled(deployer, spec_path):
    candidates, _, _ = plan_candidates(load_spec(spec_path))
    deployer.labels = {c.id: c.label for c in candidates}
    return {c.label: c.id for c in candidates}


def _run(tmp_path, deployer, spec_path=None, **kwargs):
    spec_path = spec_path or write_spec(tmp_path)
    ids = _labelled(deployer, spec_path)
    out = io.StringIO()
    code, results = run_campaign(spec_path, tmp_path / "out", deployer=deployer, stdout=out, **kwargs)
    return code, results, ids, out.getvalue()


def _by_label(results):
    return {c["label"]: c for c in results["candidates"]}


def test_each_candidate_is_deployed_benched_per_concurrency_and_torn_down(tmp_path):
    deployer = FakeDeployer(behaviour={"mem=0.35": "crash"}, speed={"topo=tp8": 200.0})
    code, results, ids, _ = _run(tmp_path, deployer)
    assert code == 0
    statuses = {c["label"]: c["status"] for c in results["candidates"]}
    assert statuses == {
        "base": "done",
        "topo=tp8": "done",
        "mem=0.35": "crashed",
        "spec=eagle-3": "done",
        "attn=fa3": "refused_kernels",
    }
    # The kernel audit's refusal is never deployed; every deployed candidate is torn down once.
    assert ("prepare", ids["attn=fa3"]) not in deployer.calls
    assert deployer.count("up") == deployer.count("down") == 4
    # Bench stages only for ready candidates, one per concurrency, each after a prefix-cache flush.
    benched = [c for c in deployer.calls if c[0] == "bench"]
    assert [(c[1], c[2]) for c in benched if c[1] == ids["base"]] == [(ids["base"], "1"), (ids["base"], "8")]
    assert not [c for c in benched if c[1] == ids["mem=0.35"]]
    for index, call in enumerate(deployer.calls):
        if call[0] == "bench":
            assert deployer.calls[index - 1][0] == "flush"


def test_a_crash_is_recorded_with_its_diagnosis_and_the_sweep_goes_on(tmp_path):
    deployer = FakeDeployer(behaviour={"base": "crash"})
    code, results, _, out = _run(tmp_path, deployer)
    crashed = _by_label(results)["base"]
    assert crashed["status"] == "crashed"
    assert crashed["wait"]["diagnosis"]["cause"] == "oom"
    assert crashed["wait"]["diagnosis"]["phase"] == "kv_cache"
    assert "KV cache" in crashed["wait"]["diagnosis"]["evidence"][0]
    assert _by_label(results)["topo=tp8"]["status"] == "done"  # the next candidate still ran
    assert "oom (phase kv_cache)" in out
    assert code == 0


def test_startup_timeout_and_deploy_errors_are_statuses_not_sweep_failures(tmp_path):
    deployer = FakeDeployer(behaviour={"base": "timeout", "topo=tp8": "deploy_error"})
    _, results, _, _ = _run(tmp_path, deployer)
    by_label = _by_label(results)
    assert by_label["base"]["status"] == "startup_timeout"
    assert by_label["topo=tp8"]["status"] == "deploy_failed"
    assert "no such image" in by_label["topo=tp8"]["reasons"][0]
    assert deployer.count("down") == 4  # torn down even when up failed


def test_the_candidate_budget_bounds_startup_and_bench_stages(tmp_path):
    budget = {"candidate_s": 100, "startup_s": 90, "teardown_s": 20, "min_stage_s": 5}
    spec_path = write_spec(tmp_path, budget=budget)
    clock = FakeClock()
    deployer = FakeDeployer(clock=clock, startup_seconds=50, stage_seconds=15)
    _labelled(deployer, spec_path)
    loaded = load_spec(spec_path)
    candidates, _, _ = plan_candidates(loaded)
    base = [c for c in candidates if c.label == "base"]
    sweep = Sweep(loaded, base, deployer, tmp_path / "out", clock=clock, log=lambda line: None)
    sweep.run()
    record = sweep.state.record(base[0].id)
    # Startup gets what is left after the teardown reserve (100 - 20 = 80 < startup_s 90).
    assert ("wait", base[0].id, "80") in deployer.calls
    # 30 s left after a 50 s startup for 2 stages: 15 s each (bench.duration_s is 15 too).
    durations = [int(c[3]) for c in deployer.calls if c[0] == "bench"]
    assert durations == [15, 15]
    assert record["status"] == "done"

    clock2 = FakeClock()
    deployer2 = FakeDeployer(clock=clock2, startup_seconds=72, stage_seconds=15)
    sweep2 = Sweep(loaded, base, deployer2, tmp_path / "out2", clock=clock2, log=lambda line: None)
    sweep2.run()
    record2 = sweep2.state.record(base[0].id)
    # 8 s left for 2 stages: 4 s each is under min_stage_s, so no stage starts.
    assert record2["status"] == "over_budget"
    assert deployer2.count("bench") == 0
    assert "budget" in record2["reasons"][0]
    assert deployer2.count("down") == 1


def test_sigterm_tears_the_current_candidate_down_keeps_partial_results_and_resume_finishes(tmp_path):
    spec_path = write_spec(tmp_path)
    deployer = FakeDeployer(behaviour={"topo=tp8": "sigterm_in_bench"})
    previous = signal.getsignal(signal.SIGTERM)
    code, results, ids, out = _run(tmp_path, deployer, spec_path=spec_path)
    assert signal.getsignal(signal.SIGTERM) == previous  # handlers restored
    assert code == 128 + signal.SIGTERM
    by_label = _by_label(results)
    assert by_label["base"]["status"] == "done"
    assert by_label["topo=tp8"]["status"] == "interrupted"
    assert ("down", ids["topo=tp8"]) in deployer.calls  # torn down on the signal
    assert results["complete"] is False and results["interrupted_by_signal"] == signal.SIGTERM
    assert {"spec=eagle-3", "mem=0.35"} <= {label for label, cid in ids.items() if cid in results["not_run"]}
    assert "rerun the same command to resume" in out
    state = json.loads((tmp_path / "out" / "state.json").read_text())
    assert state["candidates"][ids["topo=tp8"]]["status"] == "interrupted"

    # Resume: finished candidates are skipped, the interrupted one runs again, the rest run.
    second = FakeDeployer()
    code, results, _, out = _run(tmp_path, second, spec_path=spec_path)
    assert code == 0
    deployed = [call[1] for call in second.calls if call[0] == "up"]
    assert ids["base"] not in deployed
    assert deployed[0] == ids["topo=tp8"]
    assert "done in an earlier run, skipped" in out
    assert {c["status"] for c in results["candidates"]} == {"done", "refused_kernels"}
    state = json.loads((tmp_path / "out" / "state.json").read_text())
    assert state["candidates"][ids["topo=tp8"]]["attempts"] == 2
    assert len(state["resumed"]) == 1


def test_fresh_ignores_the_state_of_an_earlier_run(tmp_path):
    spec_path = write_spec(tmp_path)
    _run(tmp_path, FakeDeployer(), spec_path=spec_path)
    again = FakeDeployer()
    _run(tmp_path, again, spec_path=spec_path, resume=False)
    assert again.count("up") == 4


def test_a_leak_aborts_the_sweep_because_the_next_result_would_not_be_fair(tmp_path):
    deployer = FakeDeployer(behaviour={"base": "leak"})
    code, results, _, _ = _run(tmp_path, deployer)
    assert code == 5
    assert "abc123" in results["aborted"]
    assert deployer.count("up") == 1
    assert _by_label(results)["base"]["leaks"] == ["containers still present: ['abc123']"]


def test_a_state_file_of_another_sweep_is_refused(tmp_path):
    spec_path = write_spec(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "state.json").write_text(json.dumps({"schema": 1, "sweep": "other", "candidates": {}}))
    with pytest.raises(ValueError, match="not the state of sweep demo"):
        run_campaign(spec_path, out, deployer=FakeDeployer(), stdout=io.StringIO())
