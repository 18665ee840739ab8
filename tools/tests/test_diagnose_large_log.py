"""`sglnode diagnose` on a 200 MB log: constant memory, long lines clipped, the last crash found.

A week of a crash-looping server under systemd, or a `docker logs` of a node that ran for days,
easily passes 200 MB; the diagnosis must not read it into memory. The log is written in the test
(nothing large is committed) and the CLI runs in a child process that reports its own peak RSS.
"""

import json
from pathlib import Path

import pytest
from child_diagnose import diagnose_in_child

LOG_BYTES = 200 * 1024 * 1024
LONG_LINE_BYTES = 8 * 1024 * 1024  # one line with no newline for 8 MB (a binary dump, a JSON blob)
# Python + the rulebook alone take ~40 MB; reading the log whole would add 200 MB or more.
MAX_RSS_MIB = 120

DECODE = (
    "[2026-11-29 10:{minute:02d}:{second:02d} TP0] Decode batch, #running-req: 16, #token: 90112, "
    "token usage: 0.02, cuda graph: True, gen throughput (token/s): 412.55, #queue-req: 0\n"
)
WARNING = "[2026-11-29 10:00:00 TP0] WARNING: request 1234 exceeded the soft timeout; retrying\n"
# Each earlier lifetime of the crash-looping unit dies of something else (the port is still held).
RESTART = [
    "[2026-11-29 09:39:58] server_args=ServerArgs(model_path='/models/x', tp_size=4, port=30000)\n",
    "[2026-11-29 09:40:00 TP0] Load weight begin. avail mem=93.61 GB\n",
    "[2026-11-29 09:40:30 TP0] Load weight end. elapsed=30.00 s, type=DeepseekV4ForCausalLM, "
    "avail mem=6.00 GB, mem usage=87.61 GB.\n",
    "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
    "address already in use\n",
    "[2026-11-29 09:40:31] Received sigquit from a child process. It usually means the child failed.\n",
]
CRASH = [
    "[2026-11-29 10:59:58] server_args=ServerArgs(model_path='/models/x', tp_size=4, port=30000)\n",
    "[2026-11-29 11:00:00 TP0] Load weight begin. avail mem=93.61 GB\n",
    "[2026-11-29 11:00:30 TP0] Load weight end. elapsed=30.00 s, type=DeepseekV4ForCausalLM, "
    "avail mem=6.00 GB, mem usage=87.61 GB.\n",
    "[2026-11-29 11:00:31 TP0] Scheduler hit an exception: Traceback (most recent call last):\n",
    '  File "/opt/sglang/lib/python3.11/site-packages/sglang/srt/model_executor/model_runner.py", '
    "line 512, in init_memory_pool\n",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 94.97 GiB of which 1.20 GiB is free.\n",
    "[2026-11-29 11:00:31] Received sigquit from a child process. It usually means the child failed.\n",
]


def _write_log(path: Path) -> None:
    block = "".join(DECODE.format(minute=i % 60, second=(i * 7) % 60) for i in range(2000))
    block += WARNING * 20 + "".join(RESTART)
    with path.open("w", encoding="utf-8") as handle:
        written = 0
        handle.write("x" * LONG_LINE_BYTES + "\n")
        written += LONG_LINE_BYTES
        while written < LOG_BYTES:
            handle.write(block)
            written += len(block)
        handle.write("".join(CRASH))


@pytest.fixture(scope="module")
def big_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("biglog") / "server.log"
    _write_log(path)
    assert path.stat().st_size >= LOG_BYTES
    return path


def test_a_200_mb_log_is_diagnosed_in_bounded_memory(big_log: Path) -> None:
    diagnosis, peak_mib = diagnose_in_child(big_log)
    assert peak_mib < MAX_RSS_MIB
    assert (diagnosis["cause"], diagnosis["phase"]) == ("oom", "kv_cache")
    # Line numbers count every line read, the 8 MB one included.
    last = sum(1 for _ in big_log.open("rb"))
    assert any(line["line_no"] == last - 1 for line in diagnosis["evidence"])
    # The crash loop's earlier lifetimes (port in use) are a note; their lines are not evidence.
    assert all(line["line_no"] > last - len(CRASH) for line in diagnosis["evidence"])
    assert any("earlier server start" in note and "port_in_use" in note for note in diagnosis["notes"])
    assert len(json.dumps(diagnosis)) < 64 * 1024
