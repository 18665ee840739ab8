"""Whole failure records, diagnosed as a log shows them: a wrapper around the error it wraps, chained
exceptions, the frames of the code path between them.

fixtures/records/*.yaml quote, from the libraries' sources, the several lines one failure prints (SGLang's
"Capture cuda graph failed: {e}" around an NCCL error, an OOM or an arch refusal; the logger's prefix on
every line), each with the family the label convention gives it (docs/corpus-labels.md: what a wrapper
wraps decides when it is a family's own words; a collective failing inside the capture wrapper is the
capture's). The quoting sessions had not read the rules, and each file was scored before any rule was
written from it. A one-line message (test_library_messages.py) cannot show which line of a record decides;
this test does, and it checks each SGLang frame against the pinned wheel so that a record is what the
pinned release really prints.
"""

from functools import cache
from pathlib import Path

import pytest
from quoted_fixtures import SGLANG_FRAME_RE, drifted_sglang_frames, quoted_entries, rendered_lines

from sglnode.diagnosis.diagnose import diagnose_lines, numbered
from sglnode.diagnosis.rulebook import CAUSES, OOM_PHASES
from sglnode.upstream.wheels import WheelSource, pinned_wheel

RECORDS = Path(__file__).parent / "fixtures" / "records"
KEYS = {"kind", "family", "library", "repo", "path", "line", "text", "rendered", "why"}

ENTRIES = quoted_entries(RECORDS)


def test_the_records_are_sourced_and_span_families():
    assert len(ENTRIES) >= 8
    for entry in ENTRIES:
        assert set(entry) >= KEYS, entry["_id"]
        assert entry["kind"] == "record", entry["_id"]
        assert entry["family"] in CAUSES, entry["_id"]
        assert (entry["family"] == "oom") == ("phase" in entry), entry["_id"]
        assert entry.get("phase") in (*OOM_PHASES, None), entry["_id"]
        assert len(rendered_lines(entry)) >= 3, entry["_id"]  # a record, not a line
    assert len({entry["family"] for entry in ENTRIES}) >= 4


def test_sglangs_records_run_through_the_pinned_wheels_frames():
    # every SGLang frame of every record (a record of log lines only has none), against the pinned wheel
    frames = sum(1 for entry in ENTRIES for line in rendered_lines(entry) if SGLANG_FRAME_RE.search(line))
    assert frames >= 100
    drifted: list[str] = []
    with WheelSource(pinned_wheel("sglang")) as wheel:
        read = cache(wheel.read)
        for entry in ENTRIES:
            drifted += drifted_sglang_frames(read, entry["_id"], rendered_lines(entry), require_frames=False)
    assert not drifted, "\n".join(drifted)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry["_id"])
def test_a_whole_record_names_its_family(entry):
    diagnosis = diagnose_lines(numbered(rendered_lines(entry)))
    assert diagnosis.cause == entry["family"], f"{entry['_id']}: {entry['why']}"
    if entry.get("phase"):
        assert diagnosis.phase == entry["phase"], entry["_id"]
