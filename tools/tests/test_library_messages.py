"""The libraries' own words for a family, read from their sources, name that family.

fixtures/library-messages/*.yaml quote, from each library's source (repo, path, line), the messages
with which libraries report a failure of one family: kernel libraries refusing a GPU architecture,
engines and collectives reporting a hang or a timeout, and (harvested by sessions that did not read the
rules, scored before any rule was written from them) NIXL/UCX/Mooncake transfer failures, NCCL's and
torch c10d's errors, CUDA-graph capture errors, per-block resource limits, port clashes, import and
toolchain failures, SGLang's own argument checks, GPU OOMs (with the phase the message or its code
path states), host OOMs, and messages with memory words that report no exhaustion (family unknown,
or the family they belong to). A real report quotes them with the runtime's
values filled in; the test fills the placeholders the same way, prints the message as the library does
(an exception line, a log line at its level, with its logger's prefix) and requires the diagnosis to
name the message's family (and an OOM's stated phase). A message the rules and the vocabulary do not
know fails here, before an operator meets it as `unknown`; one they misread fails here before an
operator is sent to the wrong fix.
"""

import re
from pathlib import Path

import pytest
from quoted_fixtures import quoted_entries

from sglnode.diagnosis.diagnose import diagnose_lines, numbered
from sglnode.diagnosis.rulebook import CAUSES, OOM_PHASES
from sglnode.pins import PINS
from sglnode.upstream import strings
from sglnode.upstream.wheels import WheelSource, pinned_wheel

MESSAGES = Path(__file__).parent / "fixtures" / "library-messages"
KEYS = {"family", "library", "repo", "path", "line", "exception", "text"}
# What a placeholder becomes: the values a report of this node shows (sm_120, capability 12.0).
PLACEHOLDER_VALUES = (
    # torch c10d's log prefix ("[PG ID 0 PG GUID 0(default_pg) Rank 0] ")
    (re.compile(r"logPrefix"), "[PG ID 0 PG GUID 0(default_pg) Rank 0] "),
    (re.compile(r"major", re.IGNORECASE), "12"),
    (re.compile(r"minor", re.IGNORECASE), "0"),
    (re.compile(r"arch|sm|cap|cc|compute", re.IGNORECASE), "120"),
    (re.compile(r"device|gpu", re.IGNORECASE), PINS.gpu.device_name),
    (
        re.compile(r"time|sec|ms|dur|elapsed|wait|num|count|size|len|rank|port|id|step|n$", re.IGNORECASE),
        "600",
    ),
)
FORMAT_RE = re.compile(
    r"\{([^{}]*)\}"  # f-string, fmt, c10::str pieces
    r'|%" PRI\w+ "'  # C's inttypes macros ("%" PRId64 "s"), as the fixtures quote the C source
    r"|%(?:\([\w]+\))?[-+ #0]*\d*(?:\.\d+)?(?:l{0,2}|z|h)[sdifuxgeErp]"
)
# A rendered line printed whole: a log prefix (UCX's "[1733140000.1] [host:pid:0]", NCCL's "host:pid:tid [0]",
# glog's "E1201 10:00:00", torch's "[rank0]:") or an exception's name ("nixlBackendError: ...").
ALREADY_PRINTED_RE = re.compile(
    r"\[\d+\.\d+\] \[|\S+:\d+:\d+ \[\d+\] |[EWF]\d{4} \d\d:|\[rank\d+\]:"
    r"|(?:[A-Za-z_]\w*\.)*[A-Za-z_]\w*(?:Error|Exception):"
)
LOG_LEVELS = {"debug": "DEBUG", "info": "INFO", "warning": "WARNING", "warn": "WARNING", "error": "ERROR"}


def fill(text: str) -> str:
    def value(match: re.Match[str]) -> str:
        name = match.group(1) if match.group(1) is not None else ""
        for pattern, filled in PLACEHOLDER_VALUES:
            if pattern.search(name):
                return filled
        return re.sub(r"[^\w]+", " ", name).strip() or "600"

    return FORMAT_RE.sub(value, text)


def printed(entry: dict) -> str:
    """The line a log shows for the message: `RuntimeError: ...`, or a log call at its level, with the
    prefix its logger writes (NCCL's WARN, c10's glog-style LOG, glog/absl's for NIXL and Mooncake,
    UCX's, Rust's tracing). A `rendered` line that already carries its logger's prefix or its
    exception's name is printed as it is, as is one marked `printed_whole` (a kernel's, systemd's,
    Slurm's or kubelet's line: no Python prefix ever wraps it)."""
    text = entry.get("rendered") or fill(entry["text"])
    text = " ".join(text.split())
    if entry.get("rendered") and (entry.get("printed_whole") or ALREADY_PRINTED_RE.match(text)):
        return text
    exception = str(entry["exception"])
    source = Path(str(entry["path"]).split(" ")[0]).name
    line = entry["line"] or 1
    if exception.split(" ", maxsplit=1)[0] == "WARN" and entry["library"] == "nccl":
        return f"node1:4021:4090 [0] {source}:{line} NCCL WARN {text}"
    glog = re.match(r"(?:P?LOG|C10D_)\(?(ERROR|FATAL|WARNING)|NIXL_(ERROR|WARN)", exception)
    if glog:
        level = (glog.group(1) or glog.group(2))[0]
        if entry["library"] == "torch":  # c10's logger, after torch's rank prefix
            return f"[rank0]:[{level}1201 10:00:00.000000000 {source}:{line}] {text}"
        return f"{level}1201 10:00:00.000000 4242 {source}:{line}] {text}"  # glog's, and absl's (NIXL)
    ucx = re.match(r"ucs_(error|warn|log)", exception)
    if ucx:  # ucs/debug/log.c: "[sec.usec] [host:pid:thread] file:line UCX  LEVEL message"
        level = "WARN" if ucx.group(1) == "warn" else "ERROR"
        return f"[1733140000.123456] [node1:4242:0] {source:>17}:{line:<4} UCX  {level} {text}"
    rust = re.match(r"(?:tracing::)?(error|warn)!", exception)
    if rust:
        return f"2026-12-01T10:00:00.000000Z {rust.group(1).upper()} {text}"
    if exception.startswith("printf"):  # device-side printf: the text alone, then the kernel traps
        return text
    level = exception.split(" ", maxsplit=1)[0].rsplit(".", 1)[-1].lower().removesuffix("_once")
    if level in LOG_LEVELS:
        return f"[2026-12-01 10:00:00] {LOG_LEVELS[level]} {text}"
    raised = re.match(r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Warning|Interrupt)\b", exception)
    if raised:
        return f"{raised.group(0)}: {text}"
    if exception in {"assert", "AssertionError"}:
        return f"AssertionError: {text}"
    # C++ checks (TORCH_CHECK, throw std::runtime_error, host asserts) surface as a RuntimeError in Python.
    return f"RuntimeError: {text}"


ENTRIES = quoted_entries(MESSAGES)


def test_the_quoted_messages_are_sourced_and_cover_many_libraries():
    for entry in ENTRIES:
        assert set(entry) >= KEYS, entry["_id"]
        assert entry["family"] in CAUSES, entry["_id"]
        # a GPU OOM says the phase its message or its code path states, or null when it states none
        assert (entry["family"] == "oom") == ("phase" in entry), entry["_id"]
        assert entry.get("phase") in (*OOM_PHASES, None), entry["_id"]
        assert (entry["repo"] is None or entry["repo"].count("/") == 1) and entry["path"], entry["_id"]
    arch = {entry["library"] for entry in ENTRIES if entry["family"] == "arch_unsupported"}
    assert len(arch) >= 10, arch
    # every family, and unknown: messages with memory words that report no exhaustion
    families = {entry["family"] for entry in ENTRIES}
    assert families == set(CAUSES), set(CAUSES) - families


def test_placeholders_are_filled_as_a_report_shows_them():
    assert fill("requires SM{major}{minor}, got sm_{arch}") == "requires SM120, got sm_120"
    assert fill("timed out after %d seconds on rank %(rank)s") == "timed out after 600 seconds on rank 600"
    entry = {"library": "vllm", "path": "vllm/x.py", "line": 7}
    assert printed({**entry, "exception": "logger.warning", "text": "hang {x}"}).endswith("WARNING hang x")
    assert printed({**entry, "exception": "TORCH_CHECK", "text": "bad arch"}) == "RuntimeError: bad arch"
    assert printed({**entry, "library": "nccl", "exception": "WARN", "text": "Comm %p aborted"}).endswith(
        "x.py:7 NCCL WARN Comm 600 aborted"
    )


def test_sglangs_messages_are_the_pinned_wheels():
    # An SGLang entry that names no other commit and no unverified path quotes the pinned wheel: every
    # literal piece of its text is in one string of that file (a message reworded upstream fails here).
    placeholder = re.compile(r"\{[^{}]*\}|%[-\d.]*[sdrif]|\\n")
    claimed = [
        entry
        for entry in ENTRIES
        if entry["library"] == "sglang" and "commit" not in entry and " " not in str(entry["path"])
    ]
    assert len(claimed) >= 100
    drifted, templates = [], {}
    with WheelSource(pinned_wheel("sglang")) as wheel:
        for entry in claimed:
            path = str(entry["path"]).removeprefix("python/")
            if path not in templates:
                source = wheel.read(path)
                templates[path] = strings.literals(source, path) if path.endswith(".py") else (source,)
            pieces = [piece.strip() for piece in placeholder.split(entry["text"]) if piece.strip()]
            if not any(all(piece in template for piece in pieces) for template in templates[path]):
                drifted.append(f"{entry['_id']}: {path}: {entry['text'][:80]}")
    assert not drifted, "\n".join(drifted)


@pytest.mark.parametrize("entry", ENTRIES, ids=lambda entry: entry["_id"])
def test_a_librarys_own_message_names_its_family(entry):
    line = printed(entry)
    diagnosis = diagnose_lines(numbered([line]))
    assert diagnosis.cause == entry["family"], f"{line!r} ({entry['repo']}:{entry['path']})"
    if entry.get("phase"):
        assert diagnosis.phase == entry["phase"], f"{line!r} ({entry['repo']}:{entry['path']})"
