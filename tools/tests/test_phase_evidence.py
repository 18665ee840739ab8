"""Where an OOM happened, told from the engines' own start-up lines and traceback frames.

fixtures/phase-evidence/*.yaml quote, from each engine's source (repo, path, line), the progress lines it
logs as it moves through start-up (loading weights, sizing the KV cache, capturing CUDA graphs, serving)
and the functions a traceback shows while it is in a stage, each with the phase an OOM right after it falls
in (`phase_after`, judged from the engine's code order; the quoting sessions had not read the rules, and
the files were scored before any marker was written from them). The test puts a bare GPU OOM (one that
names no phase itself) after the line, or at the bottom of a traceback through the frame, and requires the
diagnosis to place it in that phase: an engine's line that the phase evidence does not know, or misreads,
fails here before an operator is sent to the weights fix for an OOM that happened while serving.
A `traceback` entry is a whole record (tracebacks.yaml): every frame of a code path down to torch's OOM,
where pool or cache code reached from the serving loop must still say runtime.
"""

import re
from functools import cache
from pathlib import Path

import pytest
from quoted_fixtures import drifted_sglang_frames, quoted_entries, rendered_lines

from sglnode.diagnosis.diagnose import diagnose_lines, numbered
from sglnode.diagnosis.rulebook import OOM_PHASES
from sglnode.upstream import strings
from sglnode.upstream.wheels import WheelSource, pinned_wheel

EVIDENCE = Path(__file__).parent / "fixtures" / "phase-evidence"
KEYS = {"kind", "phase_after", "library", "repo", "path", "line", "text", "rendered"}
# An OOM in words that place it nowhere: the phase must come from the line or the frame before it.
BARE_OOM = "RuntimeError: CUDA error: out of memory"
TORCH_OOM = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB."


ENTRIES = quoted_entries(EVIDENCE)


def log_for(entry: dict) -> list[str]:
    """The excerpt a report would show: the marker, then the OOM; a traceback through the frame; or the
    whole record a traceback entry quotes."""
    if entry["kind"] == "traceback":
        return rendered_lines(entry)
    if entry["kind"] == "marker":
        return [" ".join(entry["rendered"].split()), BARE_OOM]
    return [
        "Traceback (most recent call last):",
        entry["rendered"].rstrip(),
        "    out = torch.empty(size, device=device)",
        TORCH_OOM,
    ]


def test_the_quoted_lines_are_sourced_and_cover_every_phase():
    assert ENTRIES
    for entry in ENTRIES:
        assert set(entry) >= KEYS, entry["_id"]
        assert entry["kind"] in {"marker", "frame", "traceback"}, entry["_id"]
        assert entry["phase_after"] in OOM_PHASES, entry["_id"]
        assert entry["repo"].count("/") == 1 and entry["path"], entry["_id"]
    assert {entry["phase_after"] for entry in ENTRIES} == set(OOM_PHASES)
    assert len({entry["library"] for entry in ENTRIES}) >= 5
    tracebacks = [entry for entry in ENTRIES if entry["kind"] == "traceback"]
    assert len(tracebacks) >= 8
    assert {entry["phase_after"] for entry in tracebacks} >= {"weights", "kv_cache", "runtime"}


def test_sglangs_lines_and_frames_are_the_pinned_wheels():
    # SGLang's entries quote the pinned wheel: a marker's literal pieces are in one string of its file,
    # a frame's function is defined there (a line reworded or a function renamed upstream fails here).
    placeholder = re.compile(r"\{[^{}]*\}|%[-\d.]*[sdrif]|\\n")
    claimed = [entry for entry in ENTRIES if entry["library"] == "sglang"]
    assert len(claimed) >= 10
    drifted = []
    with WheelSource(pinned_wheel("sglang")) as wheel:
        read = cache(wheel.read)
        for entry in claimed:
            if entry["kind"] == "traceback":
                drifted += drifted_sglang_frames(read, entry["_id"], log_for(entry))
                continue
            source = read(entry["path"])
            if entry["kind"] == "frame":
                found = re.search(rf"\bdef {re.escape(entry['text'])}\(", source) is not None
            else:
                pieces = [piece.strip() for piece in placeholder.split(entry["text"]) if piece.strip()]
                found = any(
                    all(piece in literal for piece in pieces)
                    for literal in strings.literals(source, entry["path"])
                )
            if not found:
                drifted.append(f"{entry['_id']}: {entry['path']}: {entry['text'][:80]}")
    assert not drifted, "\n".join(drifted)


def test_a_bare_oom_alone_is_placed_by_nothing_it_says():
    # the premise: without the line before it, the OOM's own words name no phase
    diagnosis = diagnose_lines(numbered([BARE_OOM]))
    assert diagnosis.cause == "oom"
    assert diagnosis.phase_evidence.kind == "stage"


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry["_id"])
def test_an_engines_own_line_places_the_oom_after_it(entry):
    lines = log_for(entry)
    diagnosis = diagnose_lines(numbered(lines))
    assert diagnosis.cause == "oom", lines
    assert diagnosis.phase == entry["phase_after"], f"{lines[:-1]!r} ({entry['repo']}:{entry['path']})"
