from sglnode.bench.checks import Targets, evaluate


def _stage(**overrides):
    stage = {
        "label": "c=8",
        "requests": {"ok": 10, "error_rate": 0.0, "errors_by_reason": {}},
        "aborted": None,
        "output_tok_s": 1000.0,
        "ttft_ms": {"p99": 50.0},
        "itl_ms": {"p99": 20.0},
    }
    stage.update(overrides)
    return stage


def test_a_stage_within_every_target_passes():
    targets = Targets(min_output_tok_s=900, max_ttft_p99_ms=60, max_itl_p99_ms=25)
    assert evaluate([_stage()], targets) == []


def test_each_missed_target_is_named():
    targets = Targets(min_output_tok_s=2000, max_ttft_p99_ms=40, max_itl_p99_ms=10)
    failures = evaluate([_stage()], targets)
    assert len(failures) == 3
    assert all(f.startswith("c=8: ") for f in failures)


def test_errors_above_the_budget_fail_with_their_reasons():
    stage = _stage(requests={"ok": 9, "error_rate": 0.1, "errors_by_reason": {"http_503": 1}})
    assert evaluate([stage], Targets()) == ["c=8: error rate 10.0% > 0.0% (http_503 x1)"]
    assert evaluate([stage], Targets(max_error_rate=0.1)) == []


def test_no_success_and_abort_always_fail():
    stage = _stage(
        requests={"ok": 0, "error_rate": 1.0, "errors_by_reason": {"connect_failed": 3}}, aborted="gone"
    )
    failures = evaluate([stage], Targets(max_error_rate=1.0))
    assert failures == ["c=8: aborted: gone", "c=8: no request succeeded"]


def test_a_lost_client_worker_fails_the_stage():
    failures = evaluate([_stage(lost_workers=1)], Targets())
    assert failures == ["c=8: 1 client worker(s) died; their results are lost"]
