"""SGLang's own log lines: a format string to print each one and a regex to recognise it.

One module so the simulator (which prints these lines) and the progress tracker / diagnosis
(which read them) can never drift apart. Every format string below is copied from SGLang's
source; the regexes also accept the older spellings that real logs from earlier 0.5.x releases
still contain, because `sglnode diagnose` reads logs captured from any of them.

Sources (sgl-project/sglang, python/sglang/srt/...):
  model_executor/model_runner.py       Load weight begin/end, Init torch distributed
  mem_cache/memory_pool.py             KV Cache is allocated
  model_executor/pool_configurator.py  Not enough memory. Please try to increase --mem-fraction-static.
  model_executor/model_runner.py       Capture ... CUDA graph begin/end (renamed after v0.5.10 from
                                       "Capture cuda graph begin/end. Time elapsed: ...")
  managers/scheduler.py                max_total_num_tokens=..., Scheduler hit an exception
  entrypoints/http_server.py           The server is fired up and ready to roll!
  entrypoints/engine.py                Rank {i} scheduler is dead. / Exit code: {code}
  utils/common.py                      kill_process_tree called: parent_pid=..., include_parent=..., pid=...
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

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


# --- Startup milestones, in the order SGLang prints them ---------------------------------------
INIT_DISTRIBUTED_BEGIN = "Init torch distributed begin."
INIT_DISTRIBUTED_END = (
    "Init torch distributed ends. elapsed={elapsed_s:.2f} s, mem usage={mem_usage_gb:.2f} GB"
)
LOAD_WEIGHT_BEGIN = "Load weight begin. avail mem={avail_gb:.2f} GB"
LOAD_WEIGHT_END = (
    "Load weight end. elapsed={elapsed_s:.2f} s, type={model_class}, "
    "avail mem={avail_gb:.2f} GB, mem usage={mem_usage_gb:.2f} GB."
)
KV_CACHE_ALLOCATED = "KV Cache is allocated. #tokens: {tokens}, K size: {k_gb:.2f} GB, V size: {v_gb:.2f} GB"
MEMORY_POOL_END = "Memory pool end. avail mem={avail_gb:.2f} GB"
CUDA_GRAPH_BEGIN = (
    "Capture target decode CUDA graph begin. backend=full, num_tokens_per_req=1, "
    "bs={batch_sizes}, avail mem={avail_gb:.2f} GB"
)
CUDA_GRAPH_END = (
    "Capture target decode CUDA graph end. elapsed={elapsed_s:.2f} s, "
    "mem usage={mem_usage_gb:.2f} GB, avail mem={avail_gb:.2f} GB."
)
MAX_TOTAL_NUM_TOKENS = (
    "max_total_num_tokens={tokens}, chunked_prefill_size={chunked_prefill_size}, "
    "max_prefill_tokens={max_prefill_tokens}, max_running_requests={max_running_requests}, "
    "context_len={context_len}, available_gpu_mem={avail_gb:.2f} GB"
)
UVICORN_RUNNING = "INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)"
SERVER_READY = "The server is fired up and ready to roll!"

# --- Failure lines ----------------------------------------------------------------------------
NOT_ENOUGH_MEMORY = "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static."
SCHEDULER_EXCEPTION = "Scheduler hit an exception: {traceback}"
SCHEDULER_DEAD = "Rank {rank} scheduler is dead. Please check if there are relevant logs."
SCHEDULER_EXIT_CODE = "Exit code: {exit_code}"
KILL_PROCESS_TREE = (
    "kill_process_tree called: parent_pid={parent_pid}, include_parent={include_parent}, pid={pid}"
)
CUDA_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate {alloc_gib:.2f} GiB. "
    "GPU {gpu} has a total capacity of {total_gib:.2f} GiB of which {free_mib:.2f} MiB is free."
)

_FLOAT = r"(?P<{name}>\d+(?:\.\d+)?)"


def _f(name: str) -> str:
    return _FLOAT.format(name=name)


LOAD_WEIGHT_BEGIN_RE = re.compile(r"Load weight begin\. avail mem=" + _f("avail_gb") + r" GB")
LOAD_WEIGHT_END_RE = re.compile(
    r"Load weight end\.(?: elapsed=" + _f("elapsed_s") + r" s,)?.*?avail mem=" + _f("avail_gb") + r" GB"
)
KV_CACHE_ALLOCATED_RE = re.compile(
    r"KV Cache is allocated\.(?: dtype: \S+,)? #tokens: (?P<tokens>\d+)"
    r"(?:, K size: " + _f("k_gb") + r" GB, V size: " + _f("v_gb") + r" GB"
    r"|, KV size: " + _f("kv_gb") + r" GB)?"
)
MEMORY_POOL_END_RE = re.compile(r"Memory pool end\. avail mem=" + _f("avail_gb") + r" GB")
# Old: "Capture cuda graph begin. This can take up to several minutes. avail mem=.."
# New: "Capture target decode CUDA graph begin. backend=full, ..." (also prefill/verify/draft kinds).
CUDA_GRAPH_BEGIN_RE = re.compile(r"Capture (?:(?P<kind>[a-z]+(?: [a-z]+)?) )?cuda graph begin", re.IGNORECASE)
CUDA_GRAPH_END_RE = re.compile(
    r"Capture (?:(?P<kind>[a-z]+(?: [a-z]+)?) )?cuda graph end\. (?:Time elapsed: |elapsed=)"
    + _f("elapsed_s")
    + r" s",
    re.IGNORECASE,
)
MAX_TOTAL_NUM_TOKENS_RE = re.compile(r"max_total_num_tokens=(?P<tokens>\d+)")
UVICORN_RUNNING_RE = re.compile(r"Uvicorn running on (?P<url>https?://\S+)")
SERVER_READY_RE = re.compile(r"The server is fired up and ready to roll!")
NOT_ENOUGH_MEMORY_RE = re.compile(r"Not enough memory\. Please try to increase --mem-fraction-static")
SCHEDULER_DEAD_RE = re.compile(r"Rank (?P<rank>\d+) scheduler is dead")
# Newer engine.py wording: "Rank 0 scheduler died during initialization (exit code: 255). ..."
SCHEDULER_DIED_RE = re.compile(
    r"Rank (?P<rank>\d+) scheduler died during initialization \(exit code: (?P<exit_code>-?\d+)\)"
)
SCHEDULER_EXIT_CODE_RE = re.compile(r"\bExit code: (?P<exit_code>-?\d+)")
KILL_PROCESS_TREE_RE = re.compile(r"kill_process_tree called(?:: parent_pid=(?P<parent_pid>\d+))?")


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
