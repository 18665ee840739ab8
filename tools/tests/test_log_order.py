"""A log written newest first (a log console's copy) is read oldest first, in bounded memory.

RunPod's, Modal's and Google Cloud's log views, and Grafana/Loki's default, list the newest entry on top;
an operator pastes what the console shows. Read top down, the error comes before the steps that led to
it. The corpus holds one such real report (2169, RunPod); the rest are written oldest first and must
stay read as written.
"""

from __future__ import annotations

import io
import random
from pathlib import Path

import pytest
import yaml
from child_diagnose import diagnose_in_child

from sglnode.commands.diagnose import diagnose_paths
from sglnode.diagnosis import order
from sglnode.diagnosis.diagnose import (
    READ_LINE_MAX,
    diagnose_lines,
    numbered,
    runs_newest_first,
    stream_lines,
)

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
RUNPOD = CORPUS / "2169-runpod-worker-vllm-oom-while-capturing-after-gpu-blocks.log"

# An SGLang start that runs out while capturing graphs, oldest first: weights, pool, capture begin, OOM.
SGLANG_CAPTURE_OOM = [
    "[2026-12-06 10:00:00 TP0] Load weight begin. avail mem=93.61 GB",
    "[2026-12-06 10:00:30 TP0] Load weight end. elapsed=30.00 s, type=LlamaForCausalLM, avail mem=60.00 GB, "
    "mem usage=33.61 GB.",
    "[2026-12-06 10:00:31 TP0] KV Cache is allocated. #tokens: 400000, K size: 24.00 GB, V size: 24.00 GB",
    "[2026-12-06 10:00:31 TP0] Memory pool end. avail mem=11.00 GB",
    "[2026-12-06 10:00:32 TP0] Capture cuda graph begin. This can take up to several minutes. "
    "avail mem=10.90 GB",
    "[2026-12-06 10:00:40 TP0] Scheduler hit an exception: torch.OutOfMemoryError: CUDA out of memory. "
    "Tried to allocate 512.00 MiB. GPU 0 has a total capacity of 94.97 GiB of which 100.00 MiB is free.",
]


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("2024-02-02 21:44:03.976", ("iso", (2024, 2, 2, 21, 44, 3, 976_000_000))),
        ("[2026-12-06 10:00:00 TP0] Load weight begin.", ("iso", (2026, 12, 6, 10, 0, 0, 0))),
        ("2026-12-06T10:00:00.5Z stdout F hello", ("iso", (2026, 12, 6, 10, 0, 0, 500_000_000))),
        ("INFO 02-03 03:43:48 llm_engine.py:316] # GPU blocks: 7754", ("vllm", (2, 3, 3, 43, 48))),
        ("(EngineCore_DP0 pid=563) ERROR 12-23 23:34:23 [core.py:1] x", ("vllm", (12, 23, 23, 34, 23))),
        ("E0306 16:40:07.708802 117 backend_model.cc:691] ERROR", ("glog", (3, 6, 16, 40, 7, 708802))),
        ("Dec  1 12:00:00 node python3[42]: x", ("syslog", (12, 1, 12, 0, 0))),
        ("Traceback (most recent call last):", None),
        ("Sun Dec  6 20:38:17 UTC 2026", None),
    ],
)
def test_a_line_stamp_is_read_in_its_own_format(line: str, expected: tuple | None) -> None:
    assert order.stamp(line) == expected


def test_fractions_of_a_second_compare_by_value_not_by_digits() -> None:
    # ".976" is later than ".123456" within the same second
    assert order.stamp("2026-12-06 10:00:00.976 x") > order.stamp("2026-12-06 10:00:00.123456 x")


def test_the_runpod_console_copy_is_newest_first_and_an_sglang_log_is_not() -> None:
    assert runs_newest_first(RUNPOD.read_text(encoding="utf-8").splitlines())
    assert not runs_newest_first(SGLANG_CAPTURE_OOM)
    assert runs_newest_first(list(reversed(SGLANG_CAPTURE_OOM)))


def test_interleaved_processes_a_little_out_of_order_stay_oldest_first() -> None:
    # Two ranks' lines, each rank's own clock a second apart: a few steps back among many forward.
    lines = [f"[2026-12-06 10:{i // 60:02d}:{i % 60:02d} TP{i % 2}] Decode batch" for i in range(0, 120, 2)]
    lines[10], lines[11] = lines[11], lines[10]
    lines[30], lines[31] = lines[31], lines[30]
    assert not runs_newest_first(lines)


def test_no_oldest_first_report_of_the_train_split_is_taken_for_newest_first() -> None:
    taken = []
    for meta_path in sorted(CORPUS.glob("*.yaml")):
        meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
        if meta["split"] != "train":
            continue
        lines = meta_path.with_suffix(".log").read_text(encoding="utf-8").splitlines()
        if runs_newest_first(lines):
            taken.append(meta_path.stem)
    assert taken == [RUNPOD.stem]


def test_the_runpod_copy_is_diagnosed_as_the_capture_oom_it_shows() -> None:
    diagnosis = diagnose_lines(numbered(RUNPOD.read_text(encoding="utf-8").splitlines()))
    assert (diagnosis.cause, diagnosis.phase) == ("oom", "cuda_graph")
    assert diagnosis.phase_evidence is not None and diagnosis.phase_evidence.kind == "marker"
    assert order.NEWEST_FIRST_NOTE in diagnosis.notes
    # evidence keeps the line numbers as written
    assert "Capturing the model for CUDA graphs" in (diagnosis.phase_evidence.line.text or "")
    assert diagnosis.phase_evidence.line.line_no == 12


def test_a_newest_first_copy_gets_the_oldest_first_diagnosis() -> None:
    forward = diagnose_lines(numbered(SGLANG_CAPTURE_OOM))
    backward = diagnose_lines(numbered(list(reversed(SGLANG_CAPTURE_OOM))))
    assert (forward.cause, forward.phase) == ("oom", "cuda_graph")
    assert (backward.cause, backward.phase) == (forward.cause, forward.phase)
    assert backward.rule_id == forward.rule_id
    assert order.NEWEST_FIRST_NOTE in backward.notes and order.NEWEST_FIRST_NOTE not in forward.notes


@pytest.mark.parametrize("block", [1, 3, 7, 64, 1 << 20])
@pytest.mark.parametrize("seed", range(4))
def test_reading_backwards_gives_every_line_with_its_number(
    monkeypatch: pytest.MonkeyPatch, block: int, seed: int
) -> None:
    monkeypatch.setattr(order, "REVERSE_BLOCK", block)
    rng = random.Random(seed)
    lines = [
        "".join(rng.choice("ab \t\u00e9") for _ in range(rng.randrange(0, 40)))
        for _ in range(rng.randrange(0, 30))
    ]
    text = "\n".join(lines) + rng.choice(["", "\n", "\r\n"])
    raw = text.replace("\n", "\r\n") if seed % 2 else text
    expected = [(line.line_no, line.text) for line in stream_lines(io.StringIO(raw, newline=""), "x")]
    got = list(order.lines_backwards(io.BytesIO(raw.encode()), max_chars=READ_LINE_MAX))
    assert got == list(reversed(expected))


def test_a_line_longer_than_a_block_keeps_its_head(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(order, "REVERSE_BLOCK", 16)
    raw = b"first\n" + b"H" * 10 + b"x" * 500 + b"\nlast\n"
    got = list(order.lines_backwards(io.BytesIO(raw), max_chars=24))
    assert got == [(3, "last"), (2, "H" * 10 + "x" * 14), (1, "first")]


def test_the_cli_reads_a_newest_first_file_and_stdin_oldest_first(tmp_path: Path) -> None:
    newest_first = "\n".join(reversed(SGLANG_CAPTURE_OOM)) + "\n"
    path = tmp_path / "console.log"
    path.write_text(newest_first, encoding="utf-8")
    for diagnosis in (diagnose_paths([str(path)]), diagnose_paths(["-"], stdin=io.StringIO(newest_first))):
        assert (diagnosis.cause, diagnosis.phase) == ("oom", "cuda_graph")
        assert order.NEWEST_FIRST_NOTE in diagnosis.notes
        # the fatal line is the file's first line, and is cited so
        assert any(line.line_no == 1 and "OutOfMemoryError" in line.text for line in diagnosis.evidence)
    oldest_first = tmp_path / "server.log"
    oldest_first.write_text("\n".join(SGLANG_CAPTURE_OOM) + "\n", encoding="utf-8")
    assert order.NEWEST_FIRST_NOTE not in diagnose_paths([str(oldest_first)]).notes


NEWEST_FIRST_BYTES = 64 * 1024 * 1024
# Python + the rulebook take ~40 MB; a 64 MB log read whole, as str lines, would add more than 64 MB.
MAX_RSS_MIB = 100


def test_a_large_newest_first_log_is_read_backwards_in_bounded_memory(tmp_path: Path) -> None:
    decode = "[2026-12-06 09:{m:02d}:{s:02d} TP0] Decode batch, #running-req: 16, #token: 90112\n"
    block = "".join(decode.format(m=59 - i // 60 % 60, s=59 - i % 60) for i in range(3600))
    path = tmp_path / "console.log"
    with path.open("w", encoding="utf-8") as handle:
        handle.write("\n".join(reversed(SGLANG_CAPTURE_OOM)) + "\n")
        written = 0
        while written < NEWEST_FIRST_BYTES:
            handle.write(block)
            written += len(block)
        handle.write("y" * (4 * 1024 * 1024) + "\n")  # a 4 MB line with no break, oldest
    diagnosis, peak_mib = diagnose_in_child(path)
    assert peak_mib < MAX_RSS_MIB
    assert (diagnosis["cause"], diagnosis["phase"]) == ("oom", "cuda_graph")
    assert order.NEWEST_FIRST_NOTE in diagnosis["notes"]
    assert any(line["line_no"] == 1 for line in diagnosis["evidence"])
