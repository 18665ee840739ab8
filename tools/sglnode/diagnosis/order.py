"""Which way a log runs: oldest line first (what a process writes) or newest first.

Log consoles show the newest entry on top: RunPod's and Modal's web logs, Google Cloud's Logs
Explorer, Grafana/Loki's default, an issue's paste from any of them. Read top down, such a log puts
the error before the steps that led to it, so the last startup marker "before" the fatal line is the
wrong one and a traceback runs backwards. The diagnosis reads lines oldest first; this module tells
the two orders apart from the stamps lines start with, and reads a newest-first file backwards in
bounded memory.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Iterable, Iterator
from itertools import chain
from typing import IO, BinaryIO

# The stamps a line can start with, each a format of its own (stamps are compared within a format:
# a console's local-time stamp and the process's UTC one on the same line disagree by hours).
# Groups are the fields from the largest unit down.
STAMP_FORMATS: tuple[tuple[str, re.Pattern[str]], ...] = (
    # RFC 3339 / ISO 8601 and Python logging's asctime, bare or bracketed ("[2026-12-01 12:00:00 TP0] ")
    ("iso", re.compile(r"^\s*\[?(\d{4})-(\d\d)-(\d\d)[T ](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,9}))?")),
    # vLLM's logger: "INFO 02-03 03:43:49 [file.py:12] ", behind a process tag "(EngineCore pid=1) "
    (
        "vllm",
        re.compile(
            r"^\s*(?:\(\S+(?: \S+)*? pid=\d+\) )?(?:DEBUG|INFO|WARNING|ERROR|CRITICAL) "
            r"(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)"
        ),
    ),
    # glog / absl (NCCL plugins, TensorRT-LLM's C++ runtime, XLA): "E0306 16:40:07.708802 117 file.cc:691]"
    ("glog", re.compile(r"^\s*\[?[IWEF](\d\d)(\d\d) (\d\d):(\d\d):(\d\d)\.(\d+)")),
    # syslog / journald's short form: "Dec  1 12:00:00 host ..."
    ("syslog", re.compile(r"^\s*([A-Z][a-z]{2}) +(\d{1,2}) (\d\d):(\d\d):(\d\d)")),
)
MONTH_NAMES = ("Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec")
MONTHS = {name: number for number, name in enumerate(MONTH_NAMES, start=1)}
# How much of a log's head decides its order: enough stamps to see a trend, never the whole of a 200 MB log.
SAMPLE_LINES = 2000
SAMPLE_CHARS = 2 * 1024 * 1024
# A newest-first log: at least this many steps back in time, counted over the stamp formats whose steps back
# outnumber their steps forward this many times over (lines of several processes interleave a little out of
# order in an oldest-first log; equal stamps say nothing).
MIN_STEPS_BACK = 2
BACK_TO_FORWARD_RATIO = 4
REVERSE_BLOCK = 1024 * 1024
NEWEST_FIRST_NOTE = (
    "The log runs newest first (its line stamps go back in time, as a log console shows them); it was read "
    "oldest first."
)


def stamp(text: str) -> tuple[str, tuple[int, ...]] | None:
    """The format and the value of the stamp a line starts with, or None."""
    for name, pattern in STAMP_FORMATS:
        match = pattern.match(text)
        if match:
            groups = match.groups()
            if name == "syslog" and groups[0] not in MONTHS:
                continue
            fields = [MONTHS[group] if group in MONTHS else int(group or 0) for group in groups]
            if name == "iso":  # a second's fraction in nanoseconds, whatever its digits (".5", ".123456789")
                fields[-1] = int((groups[-1] or "0").ljust(9, "0"))
            return name, tuple(fields)
    return None


def stamps_run_back(stamps: Iterable[tuple[str, tuple[int, ...]] | None]) -> bool:
    """Whether a log's stamps (one per line, None for a line without) step back in time. Reads at most
    SAMPLE_LINES. Formats are judged apart: a shipper that stamps what it carries (journald) steps forward,
    in the order lines reached it, even over a newest-first copy whose own stamps step back; the formats
    that run back are counted."""
    last: dict[str, tuple[int, ...]] = {}
    steps: dict[str, list[int]] = {}  # format: [back, forward]
    for index, found in enumerate(stamps):
        if index >= SAMPLE_LINES:
            break
        if found is None:
            continue
        name, value = found
        previous = last.get(name)
        if previous is not None and value != previous:
            steps.setdefault(name, [0, 0])[0 if value < previous else 1] += 1
        last[name] = value
    running_back = [back for back, forward in steps.values() if back >= BACK_TO_FORWARD_RATIO * forward]
    return sum(running_back) >= MIN_STEPS_BACK


def read_head(handle: IO[str], max_chars: int) -> list[str]:
    """The first lines of a text stream, up to SAMPLE_LINES lines or SAMPLE_CHARS characters, each line
    read in pieces of at most max_chars (a longer line's head is all the sample needs)."""
    head: list[str] = []
    taken = 0
    while len(head) < SAMPLE_LINES and taken < SAMPLE_CHARS:
        chunk = handle.readline(max_chars)
        if not chunk:
            break
        head.append(chunk)
        taken += len(chunk)
    return head


def spooled(head: list[str], rest: IO[str]) -> BinaryIO:
    """A stream that cannot seek (stdin), written to a temporary file so that it can be read backwards."""
    spool = tempfile.TemporaryFile()  # noqa: SIM115 - the caller reads it, then closes it
    for text in chain(head, iter(lambda: rest.read(REVERSE_BLOCK), "")):
        spool.write(text.encode("utf-8", errors="replace"))
    spool.seek(0)
    return spool


def count_lines(handle: BinaryIO) -> int:
    """Lines in a binary file (a last line without a newline counts), read in blocks."""
    handle.seek(0)
    count = 0
    last = b"\n"
    for block in iter(lambda: handle.read(REVERSE_BLOCK), b""):
        count += block.count(b"\n")
        last = block[-1:]
    return count + (last != b"\n")


def lines_backwards(handle: BinaryIO, max_chars: int) -> Iterator[tuple[int, str]]:
    """(line number, text) from the last line to the first, in memory bounded by the block size and
    max_chars: a line longer than max_chars keeps its head, as the forward reader does."""
    line_no = count_lines(handle)
    position = handle.seek(0, 2)
    tail = b""  # the earliest bytes of the line being read: those after the blocks read so far
    at_end = True
    while position > 0:
        size = min(REVERSE_BLOCK, position)
        position -= size
        handle.seek(position)
        pieces = (handle.read(size) + tail).split(b"\n")
        # a line longer than a block keeps its head (its earliest bytes, up to max_chars characters of at most
        # 4 bytes each in UTF-8); the rest is never held
        tail = pieces[0][: 4 * max_chars]
        for piece in reversed(pieces[1:]):
            if at_end and piece == b"":  # the newline that ends the file starts no line
                at_end = False
                continue
            at_end = False
            yield line_no, _decoded(piece, max_chars)
            line_no -= 1
    if line_no > 0:
        yield line_no, _decoded(tail, max_chars)


def _decoded(raw: bytes, max_chars: int) -> str:
    return raw.rstrip(b"\r").decode("utf-8", errors="replace")[:max_chars]


class Replayed:
    """A text stream whose head was read already (read_head): its readline gives the head's pieces again,
    then the rest of the stream's, so a reader sees the stream whole."""

    def __init__(self, head: list[str], rest: IO[str]) -> None:
        self._head = iter(head)
        self._rest = rest

    def readline(self, size: int = -1) -> str:
        piece = next(self._head, None)
        return piece if piece is not None else self._rest.readline(size)
