import io
import json

from sglnode.bench.report import (
    SATURATED_BANNER,
    SIMULATED_BANNER,
    ProgressBar,
    print_report,
    render_table,
    write_json,
)


def _stage(saturated=False, short=0):
    return {
        "label": "c=4",
        "requests": {"ok": 3, "sent": 4, "errors": 1, "errors_by_reason": {"stalled": 1}},
        "output_tok_s": 1234.5,
        "request_s": 2.0,
        "ttft_ms": {"p50": 10.0, "p99": 12.0},
        "itl_ms": {"p50": 0.0, "p99": 5.0},
        "tpot_ms": {"p50": 4.0},
        "e2e_ms": {"p99": 900.0},
        "chunk_gap_ms": {"p99": 5.1},
        "roofline": None,
        "client": {"saturated": saturated, "saturation_reasons": ["busy"] if saturated else []},
        "tokens": {
            "short_of_requested": short,
            "requested_per_request": 64,
            "source": {"server": 3},
            "arrived_vs_reported_mismatch": 0,
        },
        "aborted": None,
    }


def _report(simulated=False, saturated=False):
    return {
        "target": {"simulated": simulated},
        "client_saturated": saturated,
        "stages": [_stage(saturated, short=2)],
        "checks": {"enabled": False, "passed": True, "failures": []},
    }


def test_table_has_one_row_per_stage():
    table = render_table([_stage(), _stage()])
    lines = table.splitlines()
    assert "TTFT p99" in lines[0] and len(lines) == 4
    assert "1,234" in lines[1] and "3/4" in lines[1]


def test_banners_and_token_warnings_are_printed():
    out = io.StringIO()
    print_report(_report(simulated=True, saturated=True), out)
    text = out.getvalue()
    assert text.count(SIMULATED_BANNER) == 2 and text.count(SATURATED_BANNER) == 2
    assert "2 request(s) stopped before the requested 64 tokens" in text
    assert "errors: {'stalled': 1}" in text


def test_a_clean_real_run_prints_no_banner():
    out = io.StringIO()
    report = _report()
    report["stages"][0]["tokens"]["short_of_requested"] = 0
    report["stages"][0]["requests"]["errors"] = 0
    print_report(report, out)
    assert "!!!" not in out.getvalue()


def test_json_is_written_whole(tmp_path):
    path = tmp_path / "r.json"
    write_json(path, {"a": 1})
    write_json(path, {"a": 2})
    assert json.loads(path.read_text()) == {"a": 2}
    assert list(tmp_path.iterdir()) == [path]


def test_progress_bar_draws_only_when_enabled():
    on, off = io.StringIO(), io.StringIO()
    for stream, enabled in ((on, True), (off, False)):
        bar = ProgressBar(stream, enabled)
        bar.start("c=1", 10)
        bar.update(5)
        bar.finish()
    assert "5/10" in on.getvalue() and off.getvalue() == ""
