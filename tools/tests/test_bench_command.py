"""`sglnode bench` end to end against loopback servers with injected behaviour."""

import json
import random
from pathlib import Path

import pytest
from bench_fake_server import Behaviour, FakeServer
from fake_sglang_http import FakeSGLang

from sglnode.bench.loadgen import StageShare
from sglnode.bench.target import flush_cache
from sglnode.cli import main
from sglnode.exitcodes import EXIT_USAGE

pytestmark = pytest.mark.timeout(60)
PLAN = Path(__file__).parent / "fixtures" / "bench" / "plan.json"


def bench(server, tmp_path, *extra):
    out = tmp_path / "bench.json"
    argv = ["bench", "--url", server.url, "--json", str(out), "--no-progress", "--warmup", "0", *extra]
    code = main(argv)
    return code, json.loads(out.read_text())


def test_sweep_reports_every_stage_with_exact_token_counts(tmp_path, capsys):
    with FakeServer(Behaviour(ttft_s=0.02)) as server:
        code, report = bench(
            server, tmp_path, "--concurrency", "1,3", "--num-requests", "6", "--output-len", "9"
        )
    assert code == 0
    assert report["complete"] and report["schema"] == "sglnode.bench/v1"
    assert [s["label"] for s in report["stages"]] == ["c=1", "c=3"]
    for stage in report["stages"]:
        assert stage["requests"]["ok"] == 6
        assert stage["output_tokens"] == 54
        assert stage["tokens"]["source"] == {"server": 6}
        assert stage["itl_ms"]["count"] == 6 * 8
    assert report["target"]["simulated"] is False
    assert "c=3" in capsys.readouterr().out


def test_warmup_requests_are_sent_but_not_measured(tmp_path):
    with FakeServer(Behaviour()) as server:
        out = tmp_path / "b.json"
        assert (
            main(["bench", "--url", server.url, "--json", str(out), "--warmup", "3", "--num-requests", "4"])
            == 0
        )
        streamed = sum(1 for h in server.headers if b"/generate" in h)
    # 3 warmup + 4 measured + the one-token probe that asks whether the target is the simulator
    assert streamed == 3 + 4 + 1
    assert json.loads(out.read_text())["stages"][0]["requests"]["sent"] == 4


def test_check_mode_fails_on_a_missed_target(tmp_path, capsys):
    with FakeServer(Behaviour(ttft_s=0.05)) as server:
        code, report = bench(
            server, tmp_path, "--num-requests", "3", "--min-output-tok-s", "1e9", "--max-ttft-p99-ms", "10"
        )
    assert code == 1
    failures = report["checks"]["failures"]
    assert any("tok/s" in f for f in failures) and any("TTFT p99" in f for f in failures)
    assert "checks: FAIL" in capsys.readouterr().out


def test_check_mode_passes_when_targets_are_met(tmp_path):
    with FakeServer(Behaviour(ttft_s=0.01)) as server:
        code, report = bench(server, tmp_path, "--num-requests", "3", "--max-ttft-p99-ms", "1000")
    assert code == 0
    assert {k: report["checks"][k] for k in ("enabled", "passed", "failures")} == {
        "enabled": True,
        "passed": True,
        "failures": [],
    }
    assert report["checks"]["targets"]["max_ttft_p99_ms"] == 1000.0


def test_503s_are_counted_by_reason_and_fail_the_run(tmp_path):
    with FakeServer(Behaviour(error_status=503, error_every=2)) as server:
        code, report = bench(server, tmp_path, "--num-requests", "8")
    stage = report["stages"][0]
    assert code == 1
    assert stage["requests"]["errors_by_reason"] == {"http_503": 4}
    assert stage["requests"]["ok"] == 4


def test_error_rate_budget_lets_a_few_errors_pass(tmp_path):
    with FakeServer(Behaviour(error_status=503, error_every=4)) as server:
        code, _ = bench(server, tmp_path, "--num-requests", "8", "--max-error-rate", "0.3")
    assert code == 0


def test_server_death_mid_run_aborts_with_partial_results(tmp_path):
    with FakeServer(Behaviour(die_after_requests=3)) as server:
        code, report = bench(server, tmp_path, "--concurrency", "1,2", "--num-requests", "500")
    stage = report["stages"][0]
    assert code == 1
    assert stage["requests"]["ok"] >= 2
    assert "server unreachable" in stage["aborted"]
    assert report["complete"] is False and len(report["stages"]) == 1


def test_stalled_stream_is_an_error_not_a_hang(tmp_path):
    with FakeServer(Behaviour(stall_after_tokens=2)) as server:
        code, report = bench(server, tmp_path, "--num-requests", "2", "--stall-timeout", "0.3")
    assert code == 1
    assert report["stages"][0]["requests"]["errors_by_reason"] == {"stalled": 2}


def test_simulated_target_is_announced_loudly(tmp_path, capsys):
    with FakeServer(Behaviour(simulated=True)) as server:
        _, report = bench(server, tmp_path, "--num-requests", "2")
    assert report["target"]["simulated"] is True
    assert len(report["target"]["evidence"]) == 2
    assert "NOT a measurement of SGLang" in capsys.readouterr().out


def test_api_key_is_sent_as_a_bearer_token(tmp_path):
    with FakeServer(Behaviour()) as server:
        bench(server, tmp_path, "--num-requests", "1", "--api", "chat", "--api-key", "s3cret")
        assert b"Authorization: Bearer s3cret" in server.headers[-1]
        assert server.bodies[-1]["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_plan_roofline_gives_efficiency_at_the_stage_concurrency(tmp_path):
    with FakeServer(Behaviour()) as server:
        _, report = bench(server, tmp_path, "--concurrency", "2", "--num-requests", "4", "--plan", str(PLAN))
    roof = report["stages"][0]["roofline"]
    assert roof["roofline_decode_tok_s"] == pytest.approx(200.0)  # halfway between c=1 and c=4
    assert roof["efficiency"] == pytest.approx(report["stages"][0]["output_tok_s"] / 200.0)


def test_workers_split_the_load_and_merge_results(tmp_path):
    with FakeServer(Behaviour(itl_s=0.001)) as server:
        code, report = bench(server, tmp_path, "--concurrency", "4", "--num-requests", "10", "--workers", "2")
    stage = report["stages"][0]
    assert code == 0
    assert stage["requests"]["ok"] == 10 and stage["client"]["workers"] == 2
    assert stage["output_tokens"] == 10 * 256


def test_poisson_rate_mode_sends_the_request_budget(tmp_path):
    with FakeServer(Behaviour()) as server:
        code, report = bench(
            server, tmp_path, "--request-rate", "200", "--num-requests", "20", "--output-len", "4"
        )
    stage = report["stages"][0]
    assert code == 0
    assert stage["request_rate"] == 200 and stage["requests"]["ok"] == 20


@pytest.mark.parametrize(
    "extra",
    [
        ["--concurrency", "0"],
        ["--concurrency", "1,x"],
        ["--url", "https://127.0.0.1:1"],
        ["--plan", "/nonexistent/plan.json"],
        ["--max-error-rate", "2"],
    ],
)
def test_bad_usage_exits_64_before_sending_anything(extra, capsys):
    try:
        code = main(["bench", "--url", "http://127.0.0.1:9", *extra])
    except SystemExit as exit_:  # refused by the argument parser itself
        code = exit_.code
    assert code == EXIT_USAGE
    assert "sglnode bench" in capsys.readouterr().err


def test_early_stop_without_usage_counts_arrived_tokens_and_warns(tmp_path, capsys):
    with FakeServer(Behaviour(usage="none", tokens=5)) as server:
        code, report = bench(
            server, tmp_path, "--api", "completions", "--num-requests", "4", "--output-len", "50"
        )
    stage = report["stages"][0]
    assert code == 0
    assert stage["output_tokens"] == 20  # 4 x 5 that arrived, not 4 x 50 requested
    assert stage["tokens"]["source"] == {"arrived": 4} and stage["tokens"]["short_of_requested"] == 4
    out = capsys.readouterr().out
    assert "stopped before the requested 50 tokens" in out and "counted from the chunks" in out


# --- issue 13: no prefix-cache hits unless asked for -----------------------------------------
@pytest.mark.parametrize("api", ["generate", "completions", "chat"])
def test_every_request_of_a_run_has_its_own_prompt_across_warmup_stages_and_workers(tmp_path, api):
    with FakeServer(Behaviour()) as server:
        out = tmp_path / "b.json"
        argv = ["bench", "--url", server.url, "--api", api, "--json", str(out), "--no-progress"]
        argv += ["--warmup", "3", "--concurrency", "1,2", "--num-requests", "6", "--workers", "2"]
        argv += ["--input-len", "24", "--output-len", "4"]
        assert main(argv) == 0
        hits, lengths = list(server.prefix_hits), list(server.prompt_lengths)
    assert len(lengths) == 3 + 6 + 6
    assert hits == [0] * len(hits)  # not one request began like an earlier one
    if api != "chat":
        assert set(lengths) == {24}  # token-id prompts of exactly --input-len


def test_the_shared_prefix_workload_is_the_only_way_to_get_cache_hits(tmp_path):
    with FakeServer(Behaviour()) as server:
        code, report = bench(
            server,
            tmp_path,
            *("--workload", "shared-prefix", "--prefix-len", "8", "--prefix-groups", "2"),
            *("--input-len", "20", "--num-requests", "10", "--output-len", "2"),
        )
        hits = list(server.prefix_hits)
    assert code == 0 and report["config"]["workload"] == "shared-prefix"
    assert hits[:2] == [0, 0]  # the first request of each group fills the cache
    assert hits[2:] == [8] * 8  # every later one reuses exactly its group's prefix


def test_the_prefix_cache_is_flushed_before_every_stage_and_the_report_says_so(tmp_path):
    with FakeServer(Behaviour()) as server:
        _, report = bench(server, tmp_path, "--concurrency", "1,2", "--num-requests", "2")
        flushes = server.flushes
    assert flushes == 2
    assert [s["cache_flush"]["ok"] for s in report["stages"]] == [True, True]


def test_a_server_without_flush_cache_is_reported_not_fatal(tmp_path):
    with FakeServer(Behaviour()) as server:
        code, report = bench(server, tmp_path, "--num-requests", "2", "--no-flush-cache")
        assert server.flushes == 0
    assert code == 0 and report["stages"][0]["cache_flush"] is None
    with FakeSGLang({}) as nothing:  # answers 404 everywhere
        result = flush_cache(nothing.url, None)
    assert result["ok"] is False and result["status"] == 404


def test_gamma_arrivals_keep_the_mean_rate_and_burstiness_needs_a_rate(tmp_path, capsys):
    share = StageShare(None, 50.0, 4000, 60.0, seed=3, burstiness=0.25)
    rng = random.Random(share.seed)
    gaps = [rng.gammavariate(share.burstiness, 1 / (share.rate * share.burstiness)) for _ in range(4000)]
    mean = sum(gaps) / len(gaps)
    cv = (sum((g - mean) ** 2 for g in gaps) / len(gaps)) ** 0.5 / mean
    assert mean == pytest.approx(1 / 50.0, rel=0.15)
    assert cv == pytest.approx(2.0, rel=0.15)  # gamma shape k: coefficient of variation 1/sqrt(k)
    with FakeServer(Behaviour()) as server:
        code, report = bench(
            server,
            tmp_path,
            "--request-rate",
            "200",
            "--burstiness",
            "0.5",
            "--num-requests",
            "8",
            "--output-len",
            "2",
        )
    assert code == 0 and report["config"]["burstiness"] == 0.5
    assert main(["bench", "--url", "http://127.0.0.1:9", "--burstiness", "0.5"]) == EXIT_USAGE
