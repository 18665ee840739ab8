"""SGLang's own log lines: the upstream template to print each one and a regex to recognise it.

The templates are not copies typed from memory: each is an entry of the upstream catalogue
(`sglnode/upstream/sglang-strings.yaml`), extracted from the pinned SGLang wheel with its file and
line, and checked against that wheel by the conformance tests. The simulator renders them
(`LOAD_WEIGHT_END.render(...)`), so `sglnode wait` / `sglnode diagnose` read the simulator exactly
as they read the pinned SGLang. The regexes are written here: they must parse every rendering of
the pinned release (tools/tests/test_loglines.py renders each template with sample values) and also
accept the older spellings that logs captured from earlier 0.5.x releases contain (corpus excerpts).

A few lines are not SGLang's: uvicorn's "Uvicorn running on" (uvicorn's own logger) and PyTorch's
"CUDA out of memory" (c10's CUDACachingAllocator), both printed into the same log.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

from sglnode.upstream import catalog

# --- Line prefix -----------------------------------------------------------------------------
# SGLang's logging format is "[%(asctime)s{prefix}] %(message)s" with asctime "%Y-%m-%d %H:%M:%S"
# and prefix " TP0", " DP0 TP0 EP0", " PP0 TP1"... (srt/utils/common.py configure_logger).
TIMESTAMP_FORMAT = "%Y-%m-%d %H:%M:%S"
PREFIX_FORMAT = "[{timestamp}{rank_tag}] "
PREFIX_RE = re.compile(
    r"^\[(?P<timestamp>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2})(?P<rank_tag>(?: [A-Z]+\d+)*)\] "
)
RANK_RE = re.compile(r"\b(?P<group>TP|DP|EP|PP)(?P<rank>\d+)\b")


def format_prefix(timestamp: datetime, rank_tag: str = "") -> str:
    """The "[2026-01-01 00:00:00 TP0] " prefix SGLang puts before every message."""
    tag = f" {rank_tag}" if rank_tag else ""
    return PREFIX_FORMAT.format(timestamp=timestamp.strftime(TIMESTAMP_FORMAT), rank_tag=tag)


# --- the pinned SGLang's templates (upstream catalogue entries) --------------------------------------
LOAD_WEIGHT_BEGIN = catalog.get("load_weight_begin")
LOAD_WEIGHT_END = catalog.get("load_weight_end")
KV_CACHE_ALLOCATED = catalog.get("kv_cache_allocated_kv")
MEMORY_POOL_END = catalog.get("memory_pool_end")
DSV4_POOL_SIZES = catalog.get("dsv4_pool_sizes")
CUDA_GRAPH_BEGIN = catalog.get("capture_decode_begin")
CUDA_GRAPH_END = catalog.get("capture_decode_end")
MAX_TOTAL_NUM_TOKENS = catalog.get("max_total_num_tokens")
SERVER_READY = catalog.get("server_ready")
PREFILL_BATCH = catalog.get("prefill_batch")
DECODE_BATCH = catalog.get("decode_batch")
DECODE_BATCH_TAIL = catalog.get("decode_batch_tail")
TOKEN_USAGE = catalog.get("token_usage")
SCHEDULER_EXCEPTION = catalog.get("scheduler_exception")
SIGQUIT = catalog.get("sigquit")
KILL_PROCESS_TREE = catalog.get("kill_process_tree")
SCHEDULER_DIED = catalog.get("scheduler_died")
KV_BUDGET_NO_MEMORY = catalog.get("kv_budget_no_memory")
NOT_ENOUGH_MEMORY = catalog.get("not_enough_memory")
CAPTURE_FAILED = catalog.get("capture_failed")
CAPTURE_FAILED_ADVICE = catalog.get("capture_failed_advice")

# Not SGLang's own strings, printed into the same log:
# uvicorn/server.py (uvicorn >= 0.51, as the pinned sglang requires)
UVICORN_RUNNING = "INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)"
# torch 2.14 c10/cuda/CUDACachingAllocator.cpp, as raised through torch.OutOfMemoryError
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc_gib:.2f} GiB. "
    "GPU {gpu} has a total capacity of {total_gib:.2f} GiB of which {free_mib:.2f} MiB is free."
)

# --- Regexes ------------------------------------------------------------------------------------
_FLOAT = r"(?P<{name}>\d+(?:\.\d+)?)"


def _f(name: str) -> str:
    return _FLOAT.format(name=name)


LOAD_WEIGHT_BEGIN_RE = re.compile(r"Load weight begin\. avail mem=" + _f("avail_gb") + r" GB")
# The pinned release: "Load weight end. elapsed=.. s, type=.., [quant=.., ]avail mem=.. GB, mem usage=.. GB.",
# or, when weights stream in during graph capture, "Load weight end. Committed real weights ...".
LOAD_WEIGHT_END_RE = re.compile(
    r"Load weight end\.(?: elapsed=" + _f("elapsed_s") + r" s,)?"
    r"(?:.*?avail mem=" + _f("avail_gb") + r" GB(?:, mem usage=" + _f("mem_usage_gb") + r" GB)?)?"
)
# The pinned release: "KV Cache is allocated. dtype: torch.bfloat16, #tokens: N, K size: .. GB, V size: .. GB"
# (or ", KV size: .. GB"; "<label> KV Cache ..." for labelled pools; "KV Cache VA upper bound." when
# the pool is sized after capture, then "Post-capture KV sizing: KV cache allocated. ...").
# Older releases: "KV Cache is allocated. #tokens: N, K size: ...".
KV_CACHE_ALLOCATED_RE = re.compile(
    r"(?:KV Cache (?:is allocated|VA upper bound)|Post-capture KV sizing: KV cache allocated)\."
    r"(?: dtype: \S+,)? #tokens: (?P<tokens>\d+)"
    r"(?:, K size: " + _f("k_gb") + r" GB, V size: " + _f("v_gb") + r" GB"
    r"|, KV size: " + _f("kv_gb") + r" GB)?"
)
MEMORY_POOL_END_RE = re.compile(r"Memory pool end\. avail mem=" + _f("avail_gb") + r" GB")
# DeepSeek-V4's compressed-attention pools log their own sizes instead of a #tokens line.
DSV4_POOL_SIZES_RE = re.compile(
    r"DSV4 pool sizes: full=(?P<full>\d+), swa=(?P<swa>\d+), c4=(?P<c4>\d+), c128=(?P<c128>\d+)"
)
DSV4_MEMORY_CALCULATION_RE = re.compile(
    r"DSV4 memory calculation: .*bytes_per_full_token=" + _f("bytes_per_full_token") + r", "
    r"available_bytes=" + _f("available_gb") + r" GB"
)
DSV4_POOL_INIT_RE = re.compile(r"Initialize DeepSeekV4TokenToKVPool with max_num_reqs=(?P<max_num_reqs>\d+)")
# Pinned release: "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, avail mem=.."
# (kinds: target/draft x decode/verify/prefill). Older: "Capture cuda graph begin. This can take ...".
CUDA_GRAPH_BEGIN_RE = re.compile(r"Capture (?:(?P<kind>[a-z]+(?: [a-z]+)?) )?cuda graph begin", re.IGNORECASE)
# Pinned release, decode: "Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=12.31 s, mem usage=..";
# Pinned release, prefill: "Capture target prefill CUDA graph end. elapsed=..";
# older: "... end. Time elapsed: ..".
CUDA_GRAPH_END_RE = re.compile(
    r"Capture (?:(?P<kind>[a-z]+(?: [a-z]+)?) )?cuda graph end\."
    r"(?: bs=(?P<batch_sizes>\[[^\]]*\]),)? (?:Time elapsed: |elapsed=)" + _f("elapsed_s") + r" ?s"
    r"(?:, mem usage=" + _f("mem_usage_gb") + r" GB)?(?:, avail mem=" + _f("avail_gb") + r" GB)?",
    re.IGNORECASE,
)
MAX_TOTAL_NUM_TOKENS_RE = re.compile(r"max_total_num_tokens=(?P<tokens>\d+)")
UVICORN_RUNNING_RE = re.compile(r"Uvicorn running on (?P<url>https?://\S+)")
SERVER_READY_RE = re.compile(r"The server is fired up and ready to roll!")
NOT_ENOUGH_MEMORY_RE = re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static")
KV_BUDGET_NO_MEMORY_RE = re.compile(
    r"Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static="
    + _f("mem_fraction_static")
    + r"\. Raise --mem-fraction-static above "
    + _f("suggested")
)
SCHEDULER_EXCEPTION_RE = re.compile(r"Scheduler hit an exception:")
# Releases before 0.5.20: "Rank 0 scheduler is dead. Please check if there are relevant logs."
SCHEDULER_DEAD_RE = re.compile(r"Rank (?P<rank>\d+) scheduler is dead")
# The pinned release's engine.py: "Rank 0 scheduler died during initialization (exit code: 255). ..."
SCHEDULER_DIED_RE = re.compile(
    r"Rank (?P<rank>\d+) scheduler died during initialization \(exit code: (?P<exit_code>-?\d+|None)\)"
)
SCHEDULER_EXIT_CODE_RE = re.compile(r"\bExit code: (?P<exit_code>-?\d+)")
KILL_PROCESS_TREE_RE = re.compile(r"kill_process_tree called(?:: parent_pid=(?P<parent_pid>\d+|None))?")
SIGQUIT_RE = re.compile(r"Received sigquit from a child process")


@dataclass(frozen=True)
class ParsedPrefix:
    """What the "[timestamp TPn] " prefix says, and the message after it."""

    timestamp: str | None
    rank_tag: str
    message: str


def split_prefix(line: str) -> ParsedPrefix:
    """Separate SGLang's "[timestamp ranks] " prefix from the message (lines without one pass through)."""
    match = PREFIX_RE.match(line)
    if not match:
        return ParsedPrefix(timestamp=None, rank_tag="", message=line)
    return ParsedPrefix(
        timestamp=match.group("timestamp"),
        rank_tag=match.group("rank_tag").strip(),
        message=line[match.end() :],
    )


def tp_rank(line: str) -> int | None:
    """The TP rank named in the line's prefix, or None when the line has no rank tag."""
    tag = split_prefix(line).rank_tag
    for match in RANK_RE.finditer(tag):
        if match.group("group") == "TP":
            return int(match.group("rank"))
    return None
