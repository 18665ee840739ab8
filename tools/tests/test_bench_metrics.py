import math

import pytest

from sglnode.bench.loadgen import WorkerResult
from sglnode.bench.metrics import (
    Slo,
    distribution_ms,
    interpolate_roofline,
    percentile_sorted,
    summarize,
)
from sglnode.bench.records import GapSink, RequestRecord
from sglnode.bench.runner import StageRun, StageSpec


def _rec(start, ttft, e2e, n, ok=True, error=None):
    return RequestRecord(ok, error, start, ttft, e2e, n, "server", n, n, 8, n, True)


def test_percentile_counts_the_zero_gaps():
    assert percentile_sorted([1.0, 2.0], 50.0, zeros=3) == 0.0
    assert percentile_sorted([1.0, 2.0], 100.0, zeros=3) == 2.0
    assert percentile_sorted([10.0, 20.0], 50.0) == pytest.approx(15.0)
    assert math.isnan(percentile_sorted([], 50.0))


def test_distribution_is_in_milliseconds_with_mean_over_all_samples():
    dist = distribution_ms([0.004], zeros=3)
    assert dist["count"] == 4 and dist["mean"] == pytest.approx(1.0) and dist["max"] == pytest.approx(4.0)
    assert distribution_ms([])["p99"] is None


def test_roofline_interpolates_and_flags_extrapolation():
    points = [(1.0, 100.0), (4.0, 400.0), (64.0, 4000.0)]
    assert interpolate_roofline(points, 2.0) == (pytest.approx(200.0), False)
    assert interpolate_roofline(points, 34.0) == (pytest.approx(2200.0), False)
    assert interpolate_roofline(points, 128.0) == (4000.0, True)
    assert interpolate_roofline([], 1.0) is None


def _run(records, cpu_s=0.1, lags=(0.0001,)):
    worker = WorkerResult(
        records=records, itl=GapSink([0.01] * 3, 1), cpu_s=cpu_s, wall_s=1.0, loop_lag_s=list(lags)
    )
    return StageRun(StageSpec("c=2", 2, None, len(records), 10.0), [worker])


def test_throughput_counts_successful_tokens_over_the_stage_wall_time():
    records = [
        _rec(0.0, 0.1, 1.0, 10),
        _rec(0.5, 0.1, 1.5, 20),
        _rec(0.2, None, None, 0, False, "http_503: x"),
    ]
    summary = summarize(_run(records), Slo(), None)
    assert summary["wall_s"] == pytest.approx(2.0)
    assert summary["output_tok_s"] == pytest.approx(15.0)
    assert summary["request_s"] == pytest.approx(1.0)
    assert summary["requests"]["errors_by_reason"] == {"http_503": 1}
    assert summary["requests"]["error_rate"] == pytest.approx(1 / 3)
    assert summary["itl_ms"]["count"] == 4


def test_goodput_keeps_only_requests_within_the_slos():
    records = [_rec(0.0, 0.1, 1.0, 10), _rec(0.0, 0.5, 1.0, 10)]
    good = summarize(_run(records), Slo(ttft_ms=200.0), None)["goodput"]
    assert good["requests_meeting_slo"] == 1 and good["fraction"] == 0.5
    tpot = summarize(_run(records), Slo(tpot_ms=60.0), None)["goodput"]  # TPOTs are 100 ms and 55.6 ms
    assert tpot["requests_meeting_slo"] == 1


@pytest.mark.parametrize(
    ("cpu_s", "lags", "saturated"), [(0.1, [0.0001], False), (0.95, [0.0001], True), (0.1, [0.02] * 5, True)]
)
def test_client_saturation_from_cpu_or_loop_lag(cpu_s, lags, saturated):
    client = summarize(_run([_rec(0.0, 0.1, 1.0, 10)], cpu_s, lags), Slo(), None)["client"]
    assert client["saturated"] is saturated
    assert bool(client["saturation_reasons"]) is saturated


def test_open_loop_efficiency_uses_the_mean_number_in_flight():
    run = _run([_rec(0.0, 0.1, 1.0, 100), _rec(0.0, 0.1, 1.0, 100)])
    run.spec = StageSpec("rate=2/s", None, 2.0, 2, 10.0)
    roof = summarize(run, Slo(), [(1.0, 100.0), (4.0, 400.0)])["roofline"]
    assert roof["at_concurrency"] == pytest.approx(2.0)
    assert roof["efficiency"] == pytest.approx(200.0 / 200.0)
