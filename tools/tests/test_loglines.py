"""The regexes against lines rendered from the pinned SGLang's own format templates.

Each template comes from the upstream catalogue (extracted from the pinned wheel; its agreement with
the wheel is tools/tests/test_upstream_strings.py). Rendering it with sample values gives the line
the real server prints; every regex that catalogue entry names in `used_by` must recognise that line
and read its numbers back.
"""

from datetime import datetime

import pytest

from sglnode.readiness import loglines
from sglnode.upstream import catalog

STAMP = datetime(2026, 11, 29, 9, 0, 0)

# Values upstream's expressions take on a real server (field names are upstream's).
SAMPLES = {
    "get_available_gpu_memory": 93.61,
    "weight_load_time": 8.01,
    "type": "DeepseekV4ForCausalLM",
    "quant_str": "quant=modelopt_fp4, ",
    "after_avail_memory": 57.59,
    "weight_load_mem_usage": 36.02,
    "perf_counter": 3.5,
    "commit_started_at": 1.25,
    "perf_counter_2": 40.0,
    "cache_name": "KV Cache",
    "post_capture_active": "is allocated",
    "dtype": "torch.bfloat16",
    "num_tokens": 549277,
    "k_size_GB": 25.14,
    "v_size_GB": 25.14,
    "kv_size_GB": 12.45,
    "max_total_num_tokens": 549277,
    "post_capture_backed_bytes": 12.45,
    "full": 8126464,
    "swa": 65536,
    "c4_max_total_num_tokens": 2031616,
    "c128_max_total_num_tokens": 63488,
    "c4_state_pool_size": 0,
    "c128_state_pool_size": 2048,
    "_unified": False,
    "_unified_fp8": False,
    "_dspark_draft_on_bf16": False,
    "bytes_per_full_token": 5290.61,
    "available_bytes": 43.48,
    "c128_state_fixed_bytes": 0.05,
    "c2_state_fixed_bytes": 0.0,
    "swa_fixed_bytes": 0.81,
    "swa_ring_fixed_bytes": 0.0,
    "c4_state_fixed_bytes": 0.0,
    "full_max_total_num_tokens": 8126464,
    "max_num_reqs": 2048,
    "swa_size": 65536,
    "c4_size": 2031616,
    "c4_logical_size": 2031616,
    "c128_size": 63488,
    "_unified_kv": False,
    "_unified_kv_fp8": False,
    "capture_name": "target decode",
    "graph_backend": "CUDA graph",
    "decode_backend": "full",
    "prefill_backend": "breakable",
    "capture_num_tokens": 8192,
    "num_tokens_per_req": 1,
    "before_mem": 11.18,
    "capture_bs": [1, 2, 4, 8, 16, 24, 32],
    "capture_time": 12.31,
    "memory_usage_gb": 1.52,
    "mem_usage": 0.28,
    "after_mem": 9.66,
    "chunked_prefill_size": 8192,
    "max_prefill_tokens": 16384,
    "max_running_requests": 2048,
    "context_len": 1048576,
    "device": "available_gpu_mem",
    "startup_available_gpu_memory_gb": 9.66,
    "parent_pid": 4242,
    "include_parent": True,
    "getpid": 4242,
    "rank": 3,
    "exitcode": -9,
    "mem_fraction_static": 0.35,
    "suggested_mem_fraction_static": 0.388,
    "minimum_mem_fraction_static": 0.3879,
    "traceback": "Traceback (most recent call last):",
}

# entry id -> groups its regex must read back from the rendered line, as text
EXPECTED_GROUPS = {
    "load_weight_begin": {"avail_gb": "93.61"},
    "load_weight_end": {"elapsed_s": "8.01", "avail_gb": "57.59", "mem_usage_gb": "36.02"},
    "kv_cache_allocated_kv": {"tokens": "549277", "k_gb": "25.14", "v_gb": "25.14"},
    "kv_cache_allocated": {"tokens": "549277", "kv_gb": "12.45"},
    "kv_cache_post_capture": {"tokens": "549277", "kv_gb": "12.45"},
    "memory_pool_end": {"avail_gb": "93.61"},
    "dsv4_pool_sizes": {"full": "8126464", "swa": "65536", "c4": "2031616", "c128": "63488"},
    "dsv4_memory_calculation": {"bytes_per_full_token": "5290.61", "available_gb": "43.48"},
    "dsv4_pool_init": {"max_num_reqs": "2048"},
    "capture_decode_begin": {"kind": "target decode"},
    "capture_prefill_begin": {"kind": "target decode"},
    "capture_decode_end": {
        "kind": "target decode",
        "batch_sizes": "[1, 2, 4, 8, 16, 24, 32]",
        "elapsed_s": "12.31",
        "mem_usage_gb": "1.52",
        "avail_gb": "9.66",
    },
    "capture_prefill_end": {"elapsed_s": "12.31", "mem_usage_gb": "0.28", "avail_gb": "9.66"},
    "max_total_num_tokens": {"tokens": "549277"},
    "scheduler_died": {"rank": "3", "exit_code": "-9"},
    "kill_process_tree": {"parent_pid": "4242"},
    "kv_budget_no_memory": {"mem_fraction_static": "0.35", "suggested": "0.388"},
}


def render(entry: catalog.Entry) -> str:
    values = {name: SAMPLES[name] for name in entry.template.field_names}
    return entry.render(**values)


def _regex_entries() -> list[tuple[str, str]]:
    pairs = []
    for entry in catalog.load().values():
        for user in entry.used_by:
            if user.startswith("loglines.") and user.endswith("_RE"):
                pairs.append((entry.id, user.removeprefix("loglines.")))
    return pairs


REGEX_ENTRIES = _regex_entries()


def test_every_regex_used_for_an_upstream_line_is_covered():
    # The catalogue, not this test, says which regex reads which upstream line.
    assert len(REGEX_ENTRIES) >= 15
    assert {entry_id for entry_id, _ in REGEX_ENTRIES} <= set(EXPECTED_GROUPS) | {
        "load_weight_end_deferred",
        "server_ready",
        "scheduler_exception",
    }


@pytest.mark.parametrize(("entry_id", "regex_name"), REGEX_ENTRIES, ids=str)
def test_upstream_line_is_recognised_by_its_regex(entry_id, regex_name):
    entry = catalog.get(entry_id)
    line = loglines.format_prefix(STAMP, "TP0") + render(entry)
    match = getattr(loglines, regex_name).search(line)
    assert match is not None, f"{regex_name} misses the pinned release's {entry_id}: {line}"
    for group, value in EXPECTED_GROUPS.get(entry_id, {}).items():
        assert match.group(group) == value, (group, line)


def test_capture_begin_and_end_do_not_cross_match():
    for begin in ("capture_decode_begin", "capture_prefill_begin"):
        assert not loglines.CUDA_GRAPH_END_RE.search(render(catalog.get(begin)))
    for end in ("capture_decode_end", "capture_prefill_end"):
        assert not loglines.CUDA_GRAPH_BEGIN_RE.search(render(catalog.get(end)))


def test_the_issue_quoted_0_5_23_graph_lines_parse():
    # Verbatim from a log of the pinned release quoted in issue 10.
    begin = "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=11.18 GB"
    end = (
        "Capture target decode CUDA graph end. bs=[1, 2, 4, 8], elapsed=12.31 s, "
        "mem usage=1.52 GB, avail mem=9.66 GB."
    )
    assert loglines.CUDA_GRAPH_BEGIN_RE.search(begin).group("kind") == "target decode"
    parsed = loglines.CUDA_GRAPH_END_RE.search(end)
    assert parsed.group("batch_sizes") == "[1, 2, 4, 8]"
    assert parsed.group("elapsed_s") == "12.31"


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


def test_kv_cache_regex_accepts_older_spellings():
    mla = "KV Cache is allocated. #tokens: 3262823, KV size: 186.77 GB"
    old_kv = "KV Cache is allocated. #tokens: 549277, K size: 25.14 GB, V size: 25.14 GB"
    assert loglines.KV_CACHE_ALLOCATED_RE.search(mla).group("kv_gb") == "186.77"
    assert loglines.KV_CACHE_ALLOCATED_RE.search(old_kv).group("k_gb") == "25.14"


def test_older_scheduler_dead_line_is_still_read():
    line = "[2025-06-01 10:00:00] Rank 0 scheduler is dead. Please check if there are relevant logs."
    assert loglines.SCHEDULER_DEAD_RE.search(line).group("rank") == "0"


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
