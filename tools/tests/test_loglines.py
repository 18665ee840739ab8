from datetime import datetime

import pytest

from sglnode import loglines

STAMP = datetime(2026, 11, 29, 9, 0, 0)

# Each format string rendered with plausible values must be recognised by its regex: the
# simulator prints the former and the watcher reads with the latter.
ROUND_TRIPS = [
    (loglines.LOAD_WEIGHT_BEGIN.format(avail_gb=93.61), loglines.LOAD_WEIGHT_BEGIN_RE, {"avail_gb": "93.61"}),
    (
        loglines.LOAD_WEIGHT_END.format(elapsed_s=8.01, model_class="X", avail_gb=62.08, mem_usage_gb=31.53),
        loglines.LOAD_WEIGHT_END_RE,
        {"elapsed_s": "8.01", "avail_gb": "62.08"},
    ),
    (
        loglines.KV_CACHE_ALLOCATED.format(tokens=549277, k_gb=25.14, v_gb=25.14),
        loglines.KV_CACHE_ALLOCATED_RE,
        {"tokens": "549277", "k_gb": "25.14"},
    ),
    (loglines.MEMORY_POOL_END.format(avail_gb=11.2), loglines.MEMORY_POOL_END_RE, {"avail_gb": "11.20"}),
    (
        loglines.CUDA_GRAPH_BEGIN.format(batch_sizes=[1, 2, 4], avail_gb=11.1),
        loglines.CUDA_GRAPH_BEGIN_RE,
        {"kind": "target decode"},
    ),
    (
        loglines.CUDA_GRAPH_END.format(elapsed_s=2.58, mem_usage_gb=0.45, avail_gb=10.65),
        loglines.CUDA_GRAPH_END_RE,
        {"elapsed_s": "2.58"},
    ),
    (
        loglines.MAX_TOTAL_NUM_TOKENS.format(
            tokens=1000,
            chunked_prefill_size=8192,
            max_prefill_tokens=16384,
            max_running_requests=256,
            context_len=32768,
            avail_gb=10.0,
        ),
        loglines.MAX_TOTAL_NUM_TOKENS_RE,
        {"tokens": "1000"},
    ),
    (loglines.UVICORN_RUNNING.format(host="127.0.0.1", port=30000), loglines.UVICORN_RUNNING_RE, {}),
    (loglines.SERVER_READY, loglines.SERVER_READY_RE, {}),
    (loglines.NOT_ENOUGH_MEMORY, loglines.NOT_ENOUGH_MEMORY_RE, {}),
    (loglines.SCHEDULER_DEAD.format(rank=3), loglines.SCHEDULER_DEAD_RE, {"rank": "3"}),
    (loglines.SCHEDULER_EXIT_CODE.format(exit_code=-9), loglines.SCHEDULER_EXIT_CODE_RE, {"exit_code": "-9"}),
    (
        loglines.KILL_PROCESS_TREE.format(parent_pid=42, include_parent=True, pid=42),
        loglines.KILL_PROCESS_TREE_RE,
        {"parent_pid": "42"},
    ),
]


@pytest.mark.parametrize(("line", "regex", "groups"), ROUND_TRIPS, ids=lambda value: str(value)[:40])
def test_format_string_is_recognised_by_its_regex(line, regex, groups):
    match = regex.search(loglines.format_prefix(STAMP, "TP0") + line)
    assert match is not None
    for name, value in groups.items():
        assert match.group(name) == value


@pytest.mark.parametrize(
    "line",
    [
        # v0.5.10-era spellings still found in captured logs
        "[2025-03-08 12:29:28 TP0] Capture cuda graph end. Time elapsed: 7.23 s. "
        "avail mem=0.53 GB. mem usage=0.93 GB.",
        "[2026-07-21 10:36:54] Capture target prefill CUDA graph end. elapsed=3.83 s, "
        "mem usage=0.28 GB, avail mem=5.23 GB.",
    ],
)
def test_graph_end_regex_accepts_old_and_new_spellings(line):
    assert loglines.CUDA_GRAPH_END_RE.search(line)


def test_graph_begin_and_end_regexes_do_not_cross_match():
    begin = loglines.CUDA_GRAPH_BEGIN.format(batch_sizes=[1], avail_gb=1.0)
    end = loglines.CUDA_GRAPH_END.format(elapsed_s=1.0, mem_usage_gb=0.1, avail_gb=1.0)
    assert not loglines.CUDA_GRAPH_END_RE.search(begin)
    assert not loglines.CUDA_GRAPH_BEGIN_RE.search(end)


def test_kv_cache_regex_accepts_mla_and_dtype_variants():
    mla = "KV Cache is allocated. #tokens: 3262823, KV size: 186.77 GB"
    dtyped = "KV Cache is allocated. dtype: torch.bfloat16, #tokens: 1933682, KV size: 12.45 GB"
    assert loglines.KV_CACHE_ALLOCATED_RE.search(mla).group("kv_gb") == "186.77"
    assert loglines.KV_CACHE_ALLOCATED_RE.search(dtyped).group("tokens") == "1933682"


def test_prefix_splits_timestamp_ranks_and_message():
    parsed = loglines.split_prefix("[2025-11-04 05:27:13 DP0 TP3 EP3] Load weight begin. avail mem=1.00 GB")
    assert parsed.timestamp == "2025-11-04 05:27:13"
    assert parsed.rank_tag == "DP0 TP3 EP3"
    assert parsed.message.startswith("Load weight begin")


def test_tp_rank_reads_the_prefix_only():
    assert loglines.tp_rank("[2025-11-04 05:27:13 DP1 TP5 EP5] x") == 5
    assert loglines.tp_rank("[2025-11-04 05:27:13] x TP7 in text") is None
    assert loglines.tp_rank("  File 'x.py', line 1") is None


def test_format_prefix_matches_sglang_layout():
    assert loglines.format_prefix(STAMP, "TP1") == "[2026-11-29 09:00:00 TP1] "
    assert loglines.format_prefix(STAMP) == "[2026-11-29 09:00:00] "
