"""Apply the failure rules to log lines, pick the cause, and gather the evidence.

The same `Diagnoser` serves `sglnode diagnose` (offline, streamed files) and `sglnode wait` (live,
line by line): it says when the log is already conclusive, so `wait` can report within a second
of the fatal line instead of waiting for the process to exit.

The OOM phase comes from evidence of where the process died, in this order: the error message when
it names the phase itself (SGLang's KV-budget errors), the outermost phase frame of the traceback
that carries the OOM (phases.yaml: what the process was doing, e.g. capture, around the forward
pass that allocated), the last startup-stage marker before the fatal line
(SGLang's milestones and other engines' equivalents), then a forward-pass frame (the model was
computing, not loading: runtime), and only then the stage the progress tracker reached. The JSON's
`phase_evidence` says which one decided, with the line.

Memory stays bounded whatever the log's size: a few hits per rule, a fixed look-back window, and
evidence lines cut to EVIDENCE_LINE_MAX characters.
"""

from __future__ import annotations

import html
import json
import re
import shutil
import subprocess
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field, replace
from typing import IO, Any, BinaryIO

from sglnode.diagnosis import cuda_errors, order
from sglnode.diagnosis.rulebook import (
    FRAME_RE,
    PhaseEvidence,
    Rule,
    Vocabulary,
    VocabularyFamily,
    load_phase_evidence,
    load_rules,
    load_vocabulary,
)
from sglnode.readiness import loglines
from sglnode.readiness.startup import STAGE_TO_OOM_PHASE, ProgressTracker, Stage

SCHEMA_VERSION = 2

# How far back (lines) to look for the traceback that led to an OOM line. SGLang scheduler
# tracebacks are ~20-60 frames; 400 lines also covers a few interleaved ranks.
TRACEBACK_LOOKBACK_LINES = 400
# Some engines print the exception first and its traceback after it (vLLM's engine loop, TGI).
TRACEBACK_LOOKAHEAD_LINES = 80
MAX_EVIDENCE_LINES_PER_RULE = 5
MAX_HITS_PER_RULE = MAX_EVIDENCE_LINES_PER_RULE
MAX_ALSO_MATCHED = 10
MAX_LAST_LINES = 5
# Error lines kept for the vocabulary fallback (the last ones: a crash prints its cause near the end).
MAX_ERROR_LINES = 200
# Traceback frames in a family's code (vocabulary.yaml `code`) kept for the last-resort match.
MAX_CODE_FRAMES = 64
# A log that ends this close after a family's frame (the frame, its source line, a caret line) ends
# inside that traceback: the exception line was cut.
CUT_TRACEBACK_TAIL_LINES = 3
# A line this long that ends mid-sentence met its reader's line width: the next line at column 0 may
# continue it whatever its first letter (a shorter line is continued only by a lower-case word).
WRAPPED_LINE_MIN = 72
# A line ending in one of these ends a sentence or a record: the next line is not its continuation.
WRAP_ENDS = frozenset(".:;!?)]}>\"'")
TRACEBACK_FRAME_RE = re.compile(r'File "[^"]+", line \d+, in ')
# A traceback pasted onto one line: its header, its frames, and the exception after them.
FLATTENED_TRACEBACK_RE = re.compile(
    r'Traceback \(most recent call last\):? +File "[^"]+", line \d+'
    r".* (?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): "
)
# The call a quoted source line makes ("decode = capture_decode_graph(...)", "cuda_graph_runner.capture(
# model, ...)"): in a traceback cut right under it, that call is the frame the paste did not reach.
SOURCE_CALL_RE = re.compile(
    r"^\s*(?:[\w.\[\], ]+\s*=\s*)?(?:(?:return|await|yield)\s+)?(?:[\w\[\]]+\.)*(\w+)\("
)


def called_frame(source: str) -> str | None:
    """The frame the call on a quoted source line runs, as a frame line names it ("in generate")."""
    call = SOURCE_CALL_RE.search(source)
    return f"in {call.group(1)}" if call is not None else None


# A 50 MB line is a log's (or an attacker's) mistake, not evidence: lines are cut when read and
# when shown.
READ_LINE_MAX = 64 * 1024
EVIDENCE_LINE_MAX = 500
NVIDIA_SMI_TIMEOUT_S = 5.0

TRACEBACK_START_RE = re.compile(r"Traceback \(most recent call last\)")
# Terminal colour codes: vLLM's and Ray's coloured log prefixes in `docker logs`, and the remnants a
# copy from a terminal leaves when the ESC byte is lost ("[36m(RayWorkerWrapper pid=1)[0m"). They
# sit before the words that anchored patterns look for (glog's "E0101", "Traceback"), so they go.
ANSI_RE = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
ANSI_REMNANT_RE = re.compile(r"\[(?:0|1|2|22|3[0-7]|39|9[0-7]|[34]8;[\d;]+)m")
# What carried a line to the reader sits before it: a log shipper's prefix (docker compose's
# "sglang-1  | ", journald's "Dec 01 12:00:00 node python3[42]: ", `docker/kubectl logs --timestamps`'
# RFC 3339 stamp), a launcher's rank, or a report's quote marker ("> "). Anchored patterns
# ("Traceback", SGLang's own "[date TP0] " prefix, argparse's "usage:") and the column-0 rules (wrapped
# lines) look at what the process wrote, so the carrier's prefix goes. The kernel's journald lines keep
# theirs: the host OOM killer's evidence reads "kernel:".
CARRIER_PREFIX_RES: tuple[re.Pattern[str], ...] = (
    re.compile(r"^[A-Za-z0-9][\w.-]*[-_]\d+\s+\| ?"),
    # the CRI log format kubelet keeps under /var/log/pods (containerd, CRI-O): stamp, stream, P/F tag
    re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) std(?:out|err) [PF] "),
    # syslog (RFC 3164, journald's short form), with the priority a relay keeps ("<11>Dec  1 ...")
    re.compile(r"^(?:<\d{1,3}>)?[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ (?!kernel:)[\w.@/-]+(?:\[\d+\])?: "),
    # RFC 5424 syslog: "<11>1 stamp host app procid msgid [structured data] "
    re.compile(r"^<\d{1,3}>1 \S+ \S+ (?!kernel )\S+ \S+ \S+ (?:-|\[[^\]]*\]) "),
    # a stamp a shipper or a logger put first: RFC 3339 (`--timestamps`), Python logging's asctime
    # ("2026-12-01 12:00:00,123 "), fluentd's stdout ("<stamp>\t<tag>\t" before the record)
    re.compile(r"^\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?: ?(?:Z|[+-]\d\d:?\d\d))?(?: |\t[\w.-]+\t)"),
    re.compile(r"^> ?"),
    # `kubectl logs --prefix`'s "[pod/sglang-0/sglang] ", `docker service logs`' "sglang.1.x7k2@node1    | ",
    # pm2's "0|sglang  | "
    re.compile(r"^\[pod/[\w.-]+/[\w.-]+\] "),
    re.compile(r"^[\w-]+\.\d+\.\w+@[\w.-]+\s+\| ?"),
    re.compile(r"^\d+\|[\w.-]+\s+\| ?"),
    # pytest's failure report ("E       RuntimeError: ..."), a code view's line numbers ("  12 | ")
    re.compile(r"^E {7}"),
    re.compile(r"^ {0,6}\d{1,6} +\| "),
    # a launcher's word for which process spoke: torchrun's "[rank0]: " and "[default0]:", srun --label's
    # "0: ", Ray's and vLLM's "(RayWorkerWrapper pid=42, ip=10.0.0.2) " and "(EngineCore_DP0 pid=42) "
    re.compile(r"^\[(?:rank|default)\d+\]: ?"),
    re.compile(r"^\d{1,4}: "),
    re.compile(r"^\((?:[A-Za-z_][\w.:-]*(?: [\w=]+)*? )?pid=\d+(?:, ip=[\d.]+)?\) "),
)
# (one alternation, tried once per line: most lines carry nothing, and a 200 MB log has millions)
CARRIER_PREFIX_RE = re.compile("|".join(f"(?:{pattern.pattern})" for pattern in CARRIER_PREFIX_RES))
# A copy from a web page (a forum, a blog, a rendered issue) trades the log's characters for
# typography: non-breaking and zero-width spaces, curly quotes, an ellipsis character, and HTML
# entities where the page escaped the text. Patterns are written in the log's own characters.
TYPOGRAPHY = str.maketrans(
    {
        "\xa0": " ",
        "\u2007": " ",
        "\u202f": " ",
        "\u200b": None,
        "\u200c": None,
        "\u200d": None,
        "\ufeff": None,
        "\u201c": '"',
        "\u201d": '"',
        "\u201e": '"',
        "\u2033": '"',
        "\u2018": "'",
        "\u2019": "'",
        "\u201a": "'",
        "\u2032": "'",
        "\u2026": "...",
    }
)
TYPOGRAPHY_CHARS = frozenset(chr(code) for code in TYPOGRAPHY)
HTML_ENTITY_RE = re.compile(r"&(?:#\d+|#x[0-9a-fA-F]+|[A-Za-z]+);")
# Ray's log deduplication marks a line its workers printed alike ("... in wake_up [repeated 3x across
# cluster]"): the count is Ray's, not the process's, and it hides the line's end that frames anchor on.
RAY_REPEATED_RE = re.compile(r"(?:\s*\[repeated \d+x across cluster\])+\s*$")
# IPython's (Jupyter's) traceback names a frame "File /path/x.py:12, in Class.method(self, ...)"; rules,
# phase frames and the family code read Python's own "  File "/path/x.py", line 12, in method".
IPYTHON_FRAME_RE = re.compile(r"^(\s*)File ([~/.\w\\:-][^,]*?):(\d+), in (?:[\w<>]+\.)*([\w<>]+)\(.*\)\s*$")
# Its notebook cell's frame ("Cell In[9], line 15"), the line each frame was running ("---> 15 out =
# model.generate(...)", read as Python's source line under a frame), and the context lines it numbers
# around that one ("     14 t1 = time.perf_counter()"), which say nothing of what ran.
IPYTHON_CELL_RE = re.compile(r"^(\s*)Cell In ?\[(\d*)\], line (\d+)\s*$")
IPYTHON_SOURCE_RE = re.compile(r"^-*-> ?\d+ (.*)$")
IPYTHON_CONTEXT_RE = re.compile(r"^ +\d+ (?! *$)")
# Lines that mean the server is going down, whatever the cause.
TERMINAL_RES: tuple[re.Pattern[str], ...] = (
    loglines.KILL_PROCESS_TREE_RE,
    loglines.SCHEDULER_DEAD_RE,
    loglines.SIGQUIT_RE,
    re.compile(r"SIGQUIT received"),
    loglines.SCHEDULER_DIED_RE,
)


# An OOM verdict needs OOM wording in an error, not in a line that narrates or advises: an
# INFO/DEBUG-level log line (vLLM's "If you are running out of memory, consider ...", a KV-cache
# allocation note, glog's I-lines) or advice text ("to avoid running out of memory") is never the
# evidence of an OOM, whatever it says about memory.
def level_re(*levels: str) -> re.Pattern[str]:
    """A log level as a word of its own, however the logger frames it ("INFO", "[INFO]", "| INFO |")."""
    return re.compile(r"(?:^|[\s\[(|])(?:" + "|".join(levels) + r")(?:[\s:\]|]|$)")


NARRATION_LEVEL_RE = level_re("INFO", "DEBUG")
# A collector that wraps every line at its own level (Cloud Logging's "INFO <time> [...] (EngineCore)
# ERROR ...") does not make the engine's ERROR line a narration.
ERROR_LEVEL_RE = level_re("ERROR", "CRITICAL", "FATAL")
# A WARNING-level line notes what a program skipped or worked around ("Extended KV cache ... is only
# supported on NVIDIA and AMD GPUs. Skipping LMCache configuration."); NCCL's WARN is its error level.
WARNING_LEVEL_RE = level_re("WARNING", "WARN")
# torch inductor's autotuner warning about one candidate config (select_algorithm.py logs a choice's "out of
# resource: shared memory" at glog's W level): it drops that candidate and times the others. (Not glog's
# W-level lines in general: c10d's socket timeouts are errors at that level.)
AUTOTUNER_WARNING_RE = re.compile(r"^W\d{4} \d\d:\d\d:\d\d\S* +\d+ \S*_inductor/select_algorithm\.py:\d+\]")
# TensorFlow's and XLA's C++ log at W level ("2023-09-26 23:49:25.317379: W external/xla/.../asm_compiler.cc:
# 231] Falling back to the CUDA driver for PTX compilation; ptxas does not support CC 9.0"): a warning.
TF_WARNING_RE = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+: W ")
# A host that logs what its engine printed at its own INFO level, the engine's "error: " kept (jan's cortex
# relaying ggml's Metal errors: "INFO  error: Insufficient Memory (...OutOfMemory)").
RELAYED_ERROR_RE = re.compile(r"(?:^|[\s\]])INFO\s+error: ")
OOM_NARRATION_RES: tuple[re.Pattern[str], ...] = (
    re.compile(r"^I\d{4} \d"),
    re.compile(
        r"\b(?:if|in case)\b[^.;]{0,30}\b(?:run(?:s|ning)? out of memory|OOMs?\b|hit(?:s|ting)? (?:an )?OOM)",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(?:to avoid|avoid(?:s|ing)?|prevent(?:s|ing)?|reduce the risk of)\b"
        r"[^.;]{0,30}\b(?:out of memory|OOMs?)\b",
        re.IGNORECASE,
    ),
    re.compile(
        r"\b(?:may|might|could|can|would|will)\s+(?:\w+\s+){0,2}(?:cause|lead to|result in|trigger|run)\s+"
        r"(?:\w+\s+){0,2}(?:out of memory|OOMs?)\b",
        re.IGNORECASE,
    ),
)


def is_warning_only(text: str) -> bool:
    """A line logged at WARNING level that reports no error of its own (not NCCL's WARN level)."""
    return (
        WARNING_LEVEL_RE.search(text) is not None
        and ERROR_LEVEL_RE.search(text) is None
        and "NCCL WARN" not in text
        and EXCEPTION_LINE_RE.search(text) is None
    )


# A warning that names what the program does instead ("Cannot use FA version 3 on Blackwell platform,
# defaulting to FA version 2"; vLLM's SymmMemCommunicator "Device capability 12.0 not supported,
# communicator is not available", printed at every start on this GPU, after which the all-reduce takes
# another path) reports a fallback the server went on with, not the failure that stopped it. A thing
# that is merely "not available" (UCX's missing cuda_ipc transport) is no fallback.
FALLBACK_RE = re.compile(
    r"\b(?:falls? back|falling back|defaulting to|(?:is|are|will be) disabled|disabling|skipping|"
    r"will not be (?:used|stored)|communicator is not available|(?:using|use) \S+(?: \S+){0,3} instead|"
    # what the program set instead ("... not supported with spec-decode ...; setting cudagraph_mode=X")
    r"setting [\w.]+ ?(?:=|to) ?\S+)",
    re.IGNORECASE,
)


# A line that ends by saying what the program uses instead ("Error running sage attention: SM89 kernel
# is not available ..., using pytorch attention instead."): it went on, whatever level it was logged at.
# (not advice: "Use backend='fa2' instead." is what the reader should do, not what the program did)
GOING_ON_INSTEAD_RE = re.compile(
    r", (?:using|falling back to) \S+(?: \S+){0,3} instead\W{0,3}$", re.IGNORECASE
)


def is_fallback_notice(text: str) -> bool:
    """A line that says what the program does instead of what it could not do: at WARNING level, or
    ending on what it uses instead."""
    if AUTOTUNER_WARNING_RE.match(text) is not None:
        return True
    if TF_WARNING_RE.match(text) is not None:
        return FALLBACK_RE.search(text) is not None
    if is_warning_only(text):
        return FALLBACK_RE.search(text) is not None
    return "instead" in text and GOING_ON_INSTEAD_RE.search(text) is not None


def is_oom_narration(text: str, *, by_level: bool = True) -> bool:
    """A line that talks about memory without reporting a failed allocation (by_level: an INFO/DEBUG
    line counts as one, unless it relays an error at that level)."""
    if (
        by_level
        and NARRATION_LEVEL_RE.search(text)
        and not ERROR_LEVEL_RE.search(text)
        and not RELAYED_ERROR_RE.search(text)
    ):
        return True
    return any(pattern.search(text) for pattern in OOM_NARRATION_RES)


# An exception line right under a frame (a frame with no source line to show: <stdin>, a compiled
# module) is the error itself, not quoted code: "RuntimeError: ...", "torch.AcceleratorError: ...",
# after any log prefix ("... [core.py:1] ValueError: ..."); quoted code is indented or starts otherwise.
EXCEPTION_LINE_RE = re.compile(r"(?:^|\]\s)(?:[A-Za-z_]\w*\.)*(?:[A-Z]\w*)?(?:Error|Exception)(?::|$)")


def shows_failure(text: str) -> bool:
    """A line that says the process failed: an exception raised, a traceback, an ERROR-level line, the
    server going down."""
    return (
        TRACEBACK_START_RE.search(text) is not None
        or EXCEPTION_LINE_RE.search(text) is not None
        or ERROR_LEVEL_RE.search(text) is not None
        or any(pattern.search(text) for pattern in TERMINAL_RES)
    )


# libstdc++'s report of an uncaught exception, whose message is the "what():" line that follows it.
THROWN_INSTANCE_RE = re.compile(r"terminate called after throwing an instance of '[^']+'\s*$")
# The first line a fresh server process prints (launch_server logs its arguments): after a crash it
# starts a new lifetime, and a crash-looping unit's log is diagnosed on its last one.
SERVER_START_MARKER = "server_args="
MAX_EARLIER_LIFETIMES = 20

# SGLang's high-volume serving lines (per-batch stats, HTTP access log) never carry a failure or a
# startup milestone; skipping them keeps offline diagnosis of day-long logs fast (~10x).
ROUTINE_LINE_MARKERS: tuple[str, ...] = ("] Decode batch", "] Prefill batch", '" 200 OK')


def is_routine(text: str) -> bool:
    """One of SGLang's per-batch or per-request lines: the server was serving."""
    return any(marker in text for marker in ROUTINE_LINE_MARKERS)


# Lines that say nothing on their own: traceback frames and separators (not "meaningful last lines").
# Backtrace frames ("   3: 0x7f... in f") are indented; "1: ..." at column 0 is a launcher's rank prefix
# (srun --label, torchrun --tee), whose line says as much as any other.
# Under a logger's prefix ("(EngineCore pid=1) ERROR 07-15 00:27:03 core.py:1231]   ^^^^"), a caret line
# is still only a pointer into the quoted source.
FRAME_LINE_RE = re.compile(r'^\s*(?:File "|at |→|\^+$|~+$|-+$)|^\s+\d+: |^\s*$|\]\s+[\^~]+\s*$')

# What `unknown` says first depends on what the log shows: a kill, no end at all, or nothing.
UNKNOWN_KILLED = (
    "No failure signature matched: the server was killed without a recognisable cause in this log.",
    "Look at the rank-0 scheduler output above the kill line: the first 'Scheduler hit an exception' "
    "or 'Traceback' block names the real error (other ranks often print only the kill).",
)
UNKNOWN_NO_END = (
    "No failure signature matched, and the log does not show the server going down (no kill or "
    "sigquit line): it may have been stopped from outside, or the log is cut.",
    "Look for the first 'Scheduler hit an exception' or 'Traceback' block, and at how the process "
    "ended (docker inspect's State.ExitCode / OOMKilled, systemctl status, journalctl).",
)
UNKNOWN_EMPTY = (
    "The log is empty: nothing was written before it ended. Check that this is the server's log "
    "(container, unit or file) and that the process started at all.",
)
UNKNOWN_NOTES: tuple[str, ...] = (
    "Check the kernel log for the host OOM killer or GPU faults: dmesg -T | grep -iE 'killed process|xid'.",
    "Compare GPU memory at death (gpu_memory_at_death, or nvidia-smi right after the crash) with "
    "the last 'avail mem=' line of the log.",
)
STAGE_OF_MARKER = {
    "weights": Stage.WEIGHTS,
    "kv_cache": Stage.KV_CACHE,
    "cuda_graph": Stage.CUDA_GRAPH,
    "serving": Stage.SERVING,
}


def without_colour(text: str) -> str:
    """The line as the process wrote it, without terminal colour codes."""
    if "\x1b" in text:
        text = ANSI_RE.sub("", text)
    if "m" in text and "[" in text:
        text = ANSI_REMNANT_RE.sub("", text)
    return text


# A traceback inside one line with its newlines escaped ("...: 'Traceback (most recent call last):\\n  File").
ESCAPED_TRACEBACK = "Traceback (most recent call last):\\n"
# A GPU's product name, as torch and nvidia-smi print it ("NVIDIA GeForce RTX 5090", "NVIDIA H100 80GB
# HBM3", this node's "NVIDIA RTX PRO ... Blackwell ... Edition").
GPU_PRODUCT_RE = re.compile(r"\bNVIDIA (?:[A-Z0-9][\w-]* ?){1,8}")
# The shortest carrier that, repeated inside a line, marks the lines a paste joined: torchrun's
# "[rank3]:" and compose's "sglang-1  |" do; srun's "0:" would split "rank 0: ..." too.
FLATTENED_OPENER_MIN = 6
FLATTENED_REPEATS_MIN = 2
ESCAPED_CHAR_RE = re.compile(r"\\([\"'\\t])")


def escaped_lines(text: str) -> list[str]:
    """The lines a line quotes with escaped newlines, their quotes and tabs unescaped."""
    return [
        ESCAPED_CHAR_RE.sub(lambda match: "\t" if match[1] == "t" else match[1], part)
        for part in text.split("\\n")
    ]


def docker_json_record(text: str) -> tuple[str, str] | None:
    """A record of Docker's json-file log driver (`/var/lib/docker/containers/<id>/<id>-json.log`:
    `{"log":"...\\n","stream":"stderr","time":"..."}`): what it logged, and its stream as the carrier."""
    try:
        record = json.loads(text)
    except ValueError:
        return None
    logged = record.get("log") if isinstance(record, dict) else None
    if not isinstance(logged, str):
        return None
    return f"docker json-file {record.get('stream', 'log')}: ", logged.rstrip("\r\n")


def record_off(text: str, pieces: list[str]) -> str | None:
    """The line a Docker json-file (or fluentd) record logged, the record's own piece added to
    `pieces`; None when `text` opens no record."""
    if text.startswith('{"log":') and (record := docker_json_record(text)) is not None:
        piece, logged = record
        pieces.append(piece)
        return logged
    return None


def carrier_pieces(text: str) -> tuple[list[str], str]:
    """split_carrier's carrier, piece by piece (a Docker record's stream, compose's prefix, a stamp,
    a launcher's rank), and the line as the process wrote it."""
    pieces: list[str] = []
    if (logged := record_off(text, pieces)) is not None:
        text = logged
    text = without_colour(text)
    # (SGLang's own "[2026-..." opens most lines of its log, and no carrier starts so)
    for _ in range(0 if text[:1] == "[" and text[1:2].isdigit() else 3):
        # compose's prefix over a stamp over a launcher's, a shipper's over a quote
        match = CARRIER_PREFIX_RE.match(text)
        if match is None or not match.end():
            break
        pieces.append(text[: match.end()])
        text = text[match.end() :]
        if (logged := record_off(text, pieces)) is not None:
            text = without_colour(logged)
    if not text.isascii() and not TYPOGRAPHY_CHARS.isdisjoint(text):
        text = text.translate(TYPOGRAPHY)
    if "&" in text and HTML_ENTITY_RE.search(text):
        text = html.unescape(text)
    if "across cluster]" in text:
        text = RAY_REPEATED_RE.sub("", text)
    if "File " in text and (frame := IPYTHON_FRAME_RE.match(text)):
        indent, path, line_no, function = frame.groups()
        text = f'{indent}  File "{path}", line {line_no}, in {function}'
    elif text.startswith("Cell In") and (cell := IPYTHON_CELL_RE.match(text)):
        indent, cell_no, line_no = cell.groups()
        text = f'{indent}  File "Cell In[{cell_no}]", line {line_no}, in <cell>'
    elif text.startswith("-") and (source := IPYTHON_SOURCE_RE.match(text)):
        text = "    " + source.group(1)
    # a terminal's or a page's copy pads lines with blanks the process never wrote ("...:" then spaces)
    if text[-1:].isspace():
        text = text.rstrip()
    return pieces, text


def split_carrier(text: str) -> tuple[str, str]:
    """What carried the line (a log shipper's or a launcher's prefix, a quote), and the line as the
    process wrote it: without terminal colours, in the log's characters rather than a web page's."""
    pieces, text = carrier_pieces(text)
    return "".join(pieces), text


def flattened_lines(pieces: list[str], plain: str) -> list[tuple[str, str]] | None:
    """The lines a paste joined into one with spaces, as (carrier, line) pairs, when a carrier piece
    that opened it ("[rank3]: ", a compose service's "sglang-1  | ", under any pieces over it) opens
    at least two more of them in the line as written; None for one line."""
    for index, piece in enumerate(pieces):
        opener = piece.strip()
        # (twice at least: a line may name its rank once, "[mooncake_store_connector.py:183] [rank0]: ...")
        if len(opener) >= FLATTENED_OPENER_MIN and plain.count(f" {opener} ") >= FLATTENED_REPEATS_MIN:
            outer = "".join(pieces[:index])
            first, *joined = plain.split(f" {opener} ")
            parts = [split_carrier(f"{opener} {part}") for part in joined]
            return [("".join(pieces), first), *((outer + carrier, part) for carrier, part in parts)]
    return None


def as_written(text: str) -> str:
    """The line as the process wrote it (split_carrier, without what carried it)."""
    return split_carrier(text)[1]


def clip(text: str, limit: int = EVIDENCE_LINE_MAX) -> str:
    """A line short enough to show: long lines keep their head and say how much was cut."""
    if len(text) <= limit:
        return text
    return f"{text[:limit]} [... {len(text) - limit} more characters]"


@dataclass(frozen=True)
class LogLine:
    """One line of a log, numbered from 1 within its source."""

    line_no: int
    text: str
    source: str = "log"
    # what carried the line (split_carrier): rules read `text`; the reader sees the line whole
    carrier: str = ""
    # the line as written, when rules read it glossed (cuda_errors.glossed: a CUDA error's name
    # with the runtime's text for it); the reader sees what was written
    written: str | None = None

    @property
    def shown(self) -> str:
        return self.carrier + (self.text if self.written is None else self.written)

    def to_json(self) -> dict[str, Any]:
        return {"line_no": self.line_no, "text": clip(self.shown), "source": self.source}


@dataclass
class Hit:
    """A rule that matched a line, and where the server was at that moment."""

    rule: Rule
    line: LogLine
    stage: Stage
    order: int  # position in the feed, across all sources
    before: list[LogLine]  # the traceback window that led to the line (OOM rules only)
    after: list[LogLine] = field(default_factory=list)  # lines after it, for tracebacks printed later
    marker: tuple[str, LogLine] | None = None  # the last stage marker before the line


@dataclass(frozen=True)
class PhaseDecision:
    phase: str
    kind: str  # message | frame | marker | served | forward | size | stage
    line: LogLine | None

    def note(self) -> str:
        where = f" (line {self.line.line_no})" if self.line else ""
        return {
            "message": f"phase {self.phase}: named by the error message itself",
            "frame": f"phase {self.phase}: from the traceback frame of what the process was doing{where}",
            "marker": f"phase {self.phase}: from the last startup marker before the error{where}",
            "forward": (
                f"phase {self.phase}: no phase frame or startup marker; a forward-pass frame{where} says the "
                "model was computing, not loading"
            ),
            "served": (
                f"phase {self.phase}: the server answered requests after the error{where}, which only a "
                "runtime OOM leaves it able to do"
            ),
            "size": (
                f"phase {self.phase}: no frame or marker; the allocation asked for more than the whole GPU "
                f"holds{where}, which no weight shard does: a buffer sized from the configuration (the KV "
                "pool, or the profiling pass that sizes it)"
            ),
            "stage": f"phase {self.phase}: no frame or marker says more; the last stage reached",
        }[self.kind]

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "line": self.line.to_json() if self.line else None}


@dataclass
class Diagnosis:
    """The answer: cause, phase, evidence, fix. `to_json` is the documented stable schema."""

    cause: str
    phase: str | None
    rule_id: str | None
    confidence: str
    fix: str | None
    source_url: str | None
    stage: str
    evidence: list[LogLine] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    also_matched: list[dict[str, Any]] = field(default_factory=list)
    gpu_memory_at_death: list[dict[str, int]] | None = None
    rule_evidence: str | None = None
    phase_evidence: PhaseDecision | None = None
    last_lines: list[LogLine] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "cause": self.cause,
            "phase": self.phase,
            "phase_evidence": self.phase_evidence.to_json() if self.phase_evidence else None,
            "rule_id": self.rule_id,
            "rule_evidence": self.rule_evidence,
            "confidence": self.confidence,
            "fix": self.fix,
            "source_url": self.source_url,
            "stage": self.stage,
            "evidence": [line.to_json() for line in self.evidence],
            "last_lines": [line.to_json() for line in self.last_lines],
            "notes": list(self.notes),
            "also_matched": list(self.also_matched),
            "gpu_memory_at_death": self.gpu_memory_at_death,
        }

    def render(self) -> str:
        """Human-readable report."""
        cause = f"{self.cause} ({self.phase})" if self.phase else self.cause
        lines = [f"cause: {cause}   confidence: {self.confidence}   stage: {self.stage}"]
        if self.rule_id:
            lines.append(f"rule: {self.rule_id}   source: {self.source_url}")
        lines.append("evidence:")
        lines.extend(f"  {line.source}:{line.line_no}: {clip(line.shown)}" for line in self.evidence)
        if self.last_lines:
            lines.append("last lines:")
            lines.extend(f"  {line.source}:{line.line_no}: {clip(line.shown)}" for line in self.last_lines)
        if self.fix:
            lines.append(f"fix: {self.fix}")
        lines.extend(f"note: {note}" for note in self.notes)
        if self.gpu_memory_at_death:
            memory = ", ".join(
                f"GPU{gpu['index']} {gpu['used_mib']}/{gpu['total_mib']} MiB"
                for gpu in self.gpu_memory_at_death
            )
            lines.append(f"gpu memory at death: {memory}")
        return "\n".join(lines)


def traceback_window(recent: Iterable[LogLine]) -> list[LogLine]:
    """The lines of the last traceback in `recent`; without a traceback header (an excerpt, a
    C++/Rust backtrace) the whole bounded look-back, where the nearest frame still wins."""
    window = list(recent)
    for index in range(len(window) - 1, -1, -1):
        if TRACEBACK_START_RE.search(window[index].text):
            return window[index:]
    return window


def frame_phase(lines: Iterable[LogLine], evidence: PhaseEvidence) -> tuple[str, LogLine] | None:
    """The phase of the outermost frame with a phase hint among `lines`: what the process was doing
    (weight loading, pool sizing, graph capture, the serving loop) calls the forward pass that
    allocated, so the outer frame names the phase and an inner `forward`/`execute_model` does not.
    A frame that spans several stages (phases.yaml `containers`) yields to the next phase frame inside
    it: lmdeploy's Engine.from_pretrained builds the model, the cache engine and the graphs."""
    container: tuple[str, LogLine] | None = None
    under_frame = False
    for line in lines:
        text = line.text
        phase = evidence.frame_phase(text)
        if phase is None and under_frame:
            # the source line quoted under a frame makes the call the next frame runs ("outputs =
            # llm.generate(prompts)"): a paste cut there still says where it was going
            called = called_frame(text)
            if called is not None:
                text = called
                phase = evidence.frame_phase(text)
        # (IPython's numbered context lines sit between a frame and the line it ran)
        under_frame = TRACEBACK_FRAME_RE.search(line.text) is not None or (
            under_frame and IPYTHON_CONTEXT_RE.match(line.text) is not None
        )
        if phase is None:
            continue
        if evidence.is_container_frame(text):
            container = container or (phase, line)
            continue
        return phase, line
    return container


class Diagnoser:
    """Feeds on log lines; knows when the log is conclusive and what it concludes."""

    def __init__(
        self,
        rules: tuple[Rule, ...] | None = None,
        tracker: ProgressTracker | None = None,
        phase_evidence: PhaseEvidence | None = None,
    ) -> None:
        self.rules = rules if rules is not None else load_rules()
        self.phase_evidence = phase_evidence if phase_evidence is not None else load_phase_evidence()
        self.vocabulary: Vocabulary = load_vocabulary()
        # The log being fed runs newest first (order.py) and its lines come in reversed: a paste that lost
        # its newlines is one of those lines, whose pieces are reversed too.
        self.newest_first = False
        self._error_lines: deque[LogLine] = deque(maxlen=MAX_ERROR_LINES)
        # Lines a rule yielded (its yields_to): the vocabulary reads them in those families' words first.
        self._yielded: dict[tuple[str, int, str], frozenset[str]] = {}
        self._after_frame = False
        self._error_opened = False  # the last error line ended in ":", its message follows
        self._in_error_message = False  # indented lines right under an error line continue its message
        self._previous_text = ""  # the line before, for a message wrapped over two lines
        self._previous_rules: set[str] = set()  # the rules that line matched
        self.tracker = tracker if tracker is not None else ProgressTracker(started_at=0.0)
        self.hits: list[Hit] = []
        # Hits of rules that need a failure after their line (a recoverable allocator warning): they
        # join `hits` when the log shows one, and are dropped when the server goes on serving.
        self._pending: list[Hit] = []
        self.hit_counts: dict[str, int] = {}
        self.terminal_lines: list[LogLine] = []
        self._recent: deque[LogLine] = deque(maxlen=TRACEBACK_LOOKBACK_LINES)
        self._meaningful: deque[LogLine] = deque(maxlen=MAX_LAST_LINES)
        self._last_milestone: LogLine | None = None
        # The last stage marker per TP rank (None: lines without a rank tag); ranks move at their own pace.
        self._markers: dict[int | None, tuple[str, LogLine]] = {}
        self._collecting: list[tuple[Hit, int]] = []
        self._fed = 0
        # The leading whitespace every non-empty line so far has shared (None: no line yet).
        self._indent: str | None = None
        # Where the server became ready (feed order): errors after it still count (a PD transfer or a
        # collective can fail per request while the server stays up), errors before it were survived.
        self._ready_at: int | None = None
        self._error_order: deque[int] = deque(maxlen=MAX_ERROR_LINES)
        self._code_frames: deque[tuple[VocabularyFamily, LogLine, int]] = deque(maxlen=MAX_CODE_FRAMES)
        # The frames of the traceback being printed (feed order): its innermost one says where it raised.
        self._traceback_frames: deque[tuple[LogLine, int]] = deque(maxlen=MAX_CODE_FRAMES)
        # The family of the call the last quoted source line makes, with its frame (feed order): where a
        # traceback cut right under it was going.
        self._last_call: tuple[VocabularyFamily, LogLine, int] | None = None
        self._last_frame: LogLine | None = None
        # Traceback frames in CUDA-graph capture code (phases.yaml), with their feed order: a collective that
        # failed in a traceback through them failed inside the capture.
        self._capture_frames: deque[tuple[LogLine, int]] = deque(maxlen=MAX_CODE_FRAMES)
        self.earlier_crashes: list[str] = []  # cause of each earlier server lifetime that went down
        self.earlier_lifetimes = 0
        # The diagnosis of the latest earlier lifetime that named a cause: a restarted server (compose
        # `restart: on-failure:N`, systemd Restart=) whose new start has not failed yet is still down
        # for that cause, and a wait that ends then must not answer `unknown`.
        self._earlier_diagnosis: Diagnosis | None = None

    def _speaks_for(self, causes: frozenset[str], line: LogLine) -> bool:
        """Whether the line uses the words of one of `causes`' families (a wrapper's own words, "Capture
        cuda graph failed", come first in the vocabulary's order, so precedence is not asked). A GPU's
        product name ("... on NVIDIA GeForce RTX 5090 Blackwell during CUDA graph capture") says
        which GPU ran it, not that its architecture was refused."""
        text = GPU_PRODUCT_RE.sub("", line.text)
        return any(self.vocabulary.family(cause).words.search(text) for cause in causes)

    def feed(self, line: LogLine, timestamp: float = 0.0) -> list[Hit]:
        """Classify one line; return the rule hits it produced."""
        text, indent = line.text, ""
        if self._indent and text.strip():
            # A report's code block indents every line of the excerpt: that indent is the carrier's.
            # It is what every line so far has shared, so one line at column 0 ends it for good.
            indent = text[: len(self._indent)]
            if indent != self._indent:
                shared = 0  # characters, not path components
                while shared < len(indent) and indent[shared] == self._indent[shared]:
                    shared += 1
                self._indent = indent = self._indent[:shared]
            text = text[len(indent) :]
        elif self._indent is None and text.strip():
            self._indent = indent = text[: len(text) - len(text.lstrip(" \t"))]
            text = text[len(indent) :]
        pieces, plain = carrier_pieces(text)
        joined = flattened_lines(pieces, plain)
        if joined is not None:
            # A paste that lost its newlines (a web page's copy): read the lines it joined one by one.
            hits = []
            for carrier, part in reversed(joined) if self.newest_first else joined:
                hits += self._feed_written(replace(line, text=part, carrier=indent + carrier), timestamp)
            return hits
        carrier = "".join(pieces)
        if plain != line.text:
            line = replace(line, text=plain, carrier=indent + carrier)
        if ESCAPED_TRACEBACK in line.text:
            # A traceback quoted inside one line, its newlines escaped (a JSON error body, a repr of a
            # child's stderr): read as the lines it quotes, under the same line number.
            hits = []
            for part in escaped_lines(line.text):
                hits += self._feed_written(replace(line, text=part), timestamp)
            return hits
        return self._feed_written(line, timestamp)

    def _feed_written(self, line: LogLine, timestamp: float) -> list[Hit]:
        """Classify one line as the process wrote it (its carrier taken off)."""
        gloss = cuda_errors.glossed(line.text)
        if gloss is not None:
            line = replace(line, text=gloss, written=line.text)
        self._fed += 1
        if SERVER_START_MARKER in line.text and (self.hits or self.terminal_lines):
            self._start_new_lifetime()
        self._collect_after(line)
        if is_routine(line.text):
            # A batch or an answered request: the server was serving (an OOM after it is a runtime one).
            self._markers[loglines.tp_rank(line.text)] = ("serving", line)
            self._recent.append(line)
            # a log of nothing else still shows where it stopped (unknown's last lines)
            self._meaningful.append(line)
            self._previous_text, self._previous_rules = "", set()
            self._pending.clear()  # it recovered: the warning was not the crash
            return []
        if self._pending and shows_failure(line.text):
            self.hits.extend(self._pending)
            self._pending.clear()
        elif self._pending and self.phase_evidence.is_request_line(line.text):
            self._pending.clear()
        if self.tracker.feed(timestamp, line.line_no, line.text) is not None:
            self._last_milestone = line
            if self.tracker.ready and self._ready_at is None:
                self._ready_at = self._fed
        rank = loglines.tp_rank(line.text)
        stage = self.phase_evidence.marker_stage(line.text)
        if stage is not None:
            self._markers[rank] = (stage, line)
        new_hits = []
        narration: bool | None = None
        # A message wrapped over two lines (a terminal, a blog, a report's line width) is matched rejoined.
        joined = self._rejoined(line)
        matched_before, self._previous_rules = self._previous_rules, set()
        self._previous_text = line.text
        for rule in self.rules:
            matched = line if rule.matches(line.text) else None
            # (a rule the line before matched on its own already has that line as its hit)
            if (
                matched is None
                and joined is not None
                and rule.id not in matched_before
                and rule.matches(joined.text)
            ):
                matched = joined
            if matched is not None and rule.during:
                marker = self._marker_for(rank)
                if marker is None or marker[0] not in rule.during:
                    continue
            if matched is not None:
                self._previous_rules.add(rule.id)
                if rule.cause == "oom":
                    if rule.reads_info_lines:
                        narrated = is_oom_narration(matched.text, by_level=False)
                    elif matched is line:  # (the line's answer is the same for every OOM rule: asked once)
                        narration = is_oom_narration(line.text) if narration is None else narration
                        narrated = narration
                    else:
                        narrated = is_oom_narration(matched.text)
                    if narrated:
                        continue
                elif is_fallback_notice(matched.text):
                    continue
                elif rule.yields_to and self._speaks_for(rule.yields_to, matched):
                    # a wrapper's or a flag's refusal in an architecture's or a block limit's words is
                    # theirs: the vocabulary reads the line in those families' words first
                    if len(self._yielded) < MAX_ERROR_LINES:
                        self._yielded[(matched.source, matched.line_no, matched.text)] = rule.yields_to
                    continue
                count = self.hit_counts.get(rule.id, 0)
                self.hit_counts[rule.id] = count + 1
                if count >= MAX_HITS_PER_RULE:
                    continue
                before = traceback_window(self._recent) if rule.phase == "from_context" else []
                hit = Hit(
                    rule,
                    matched,
                    self.tracker.stage_of(rank),
                    order=self._fed,
                    before=before,
                    marker=self._marker_for(rank),
                )
                if rule.phase == "from_context":
                    self._collecting.append((hit, TRACEBACK_LOOKAHEAD_LINES))
                if rule.needs_failure_after:
                    self._pending.append(hit)
                else:
                    new_hits.append(hit)
        self.hits.extend(new_hits)
        if any(pattern.search(line.text) for pattern in TERMINAL_RES):
            if len(self.terminal_lines) < MAX_LAST_LINES:  # the first ones say it; a crash loop repeats them
                self.terminal_lines.append(line)
        elif not FRAME_LINE_RE.search(line.text):
            self._meaningful.append(line)
            # Frames and the source line under each frame quote code ("timeout=timeout"), not errors.
            # (an exception line that quotes a frame is still the exception: torch inductor's "RuntimeError:
            # Error: accessing tensor output of CUDAGraphs ... Stack trace: File "bug.py", line 7, in f")
            # (nor is a whole traceback flattened onto one line by a paste: "... Traceback (most recent call
            # last): File "a.py", line 1, in f x = g() RuntimeError: DataLoader worker ... is killed")
            is_frame = (
                FRAME_RE.search(line.text) is not None
                and EXCEPTION_LINE_RE.search(line.text) is None
                and FLATTENED_TRACEBACK_RE.search(line.text) is None
            )
            opened = self._error_opened
            self._error_opened = False
            continued = self._in_error_message and line.text[:1].isspace()
            quoted = self._after_frame and EXCEPTION_LINE_RE.search(line.text) is None
            if (
                not is_frame
                and not quoted
                and (opened or continued or self.vocabulary.is_error_line(line.text))
                and not is_fallback_notice(line.text)
            ):
                self._error_lines.append(line)
                self._error_order.append(self._fed)
                # "UserWarning:" / "RuntimeError:" alone on a line: the message is on the next one.
                self._error_opened = line.text.rstrip().endswith(":") and not opened
                self._in_error_message = True
            else:
                self._in_error_message = False
                self._drop_warning_gone_on_from(line)
        if TRACEBACK_START_RE.search(line.text):
            self._traceback_frames.clear()
        frame_line = FRAME_RE.search(line.text) is not None
        # IPython's numbered context lines between a frame and the line it ran keep that frame open
        context = self._last_frame is not None and IPYTHON_CONTEXT_RE.match(line.text) is not None
        if self._last_frame is not None and not frame_line and not context:
            self._note_call(self._last_frame, line)  # the source line under a traceback frame
        traceback_frame = frame_line and TRACEBACK_FRAME_RE.search(line.text) is not None
        self._after_frame = frame_line or (context and self._after_frame)
        self._last_frame = line if traceback_frame else (self._last_frame if context else None)
        if traceback_frame:
            self._traceback_frames.append((line, self._fed))
            if self.phase_evidence.frame_phase(line.text) == "cuda_graph":
                self._capture_frames.append((line, self._fed))
        if self._after_frame:
            family = self.vocabulary.code_family(line.text)
            if family is not None:
                self._code_frames.append((family, line, self._fed))
        self._recent.append(line)
        return new_hits

    def _drop_warning_gone_on_from(self, line: LogLine) -> None:
        """A warning whose next line says what the program does without ("LMCache WARNING: Failed to
        allocate memory for the KV cache." / "The KV cache will not be stored."): the two lines are one
        fallback notice, not the failure."""
        if (
            self._error_order
            and self._error_order[-1] == self._fed - 1
            and is_warning_only(self._error_lines[-1].text)
            and not WARNING_LEVEL_RE.search(line.text)
            and FALLBACK_RE.search(line.text) is not None
        ):
            self._error_lines.pop()
            self._error_order.pop()

    def _note_call(self, frame: LogLine, source: LogLine) -> None:
        """The source line quoted under a traceback frame: the family of the code it calls, if any."""
        called = called_frame(source.text)
        family = self.vocabulary.code_family(called) if called is not None else None
        self._last_call = (family, frame, self._fed) if family is not None else None

    def _rejoined(self, line: LogLine) -> LogLine | None:
        """This line joined to the one before when it reads as that line's wrapped continuation: it starts
        at column 0, the line before ends mid-sentence, and either this line starts with a lower-case
        word or the one before is as long as a wrapped line."""
        previous = self._previous_text
        first = line.text[:1]
        if not previous or not first or first.isspace() or previous.rstrip()[-1:] in WRAP_ENDS:
            return None
        if not first.islower() and len(previous) < WRAPPED_LINE_MIN:
            return None
        if FRAME_RE.search(previous) or len(previous) > READ_LINE_MAX:
            return None
        return replace(line, text=f"{previous.rstrip()} {line.text.strip()}")

    def _start_new_lifetime(self) -> None:
        """A restarted server: what the earlier one died of becomes a note, not the diagnosis."""
        best = self.best_hit()
        if best is not None:
            self._earlier_diagnosis = self.result()
        self.earlier_lifetimes += 1
        if len(self.earlier_crashes) < MAX_EARLIER_LIFETIMES:
            self.earlier_crashes.append(best.rule.cause if best else "unknown")
        self.hits = []
        self._pending = []
        self.hit_counts = {}
        self.terminal_lines = []
        self._markers = {}
        self._collecting = []
        self._last_milestone = None
        self._meaningful.clear()
        self._error_lines.clear()
        self._error_order.clear()
        self._yielded.clear()
        self._code_frames.clear()
        self._traceback_frames.clear()
        self._last_call = None
        self._last_frame = None
        self._capture_frames.clear()
        self._ready_at = None
        self._recent.clear()
        self.tracker.restart()

    def _marker_for(self, rank: int | None) -> tuple[str, LogLine] | None:
        """The crashing rank's own last marker; an untagged line takes the latest of any rank."""
        if rank is not None and rank in self._markers:
            return self._markers[rank]
        if rank is None and self._markers:
            return max(self._markers.values(), key=lambda marker: marker[1].line_no)
        return self._markers.get(None)

    def _collect_after(self, line: LogLine) -> None:
        still = []
        for hit, remaining in self._collecting:
            hit.after.append(line)
            if remaining > 1:
                still.append((hit, remaining - 1))
        self._collecting = still

    def feed_all(self, lines: Iterable[LogLine]) -> None:
        for line in lines:
            self.feed(line)

    @property
    def conclusive(self) -> bool:
        """A fatal signature that proves the crash on its own has been seen."""
        return any(hit.rule.conclusive for hit in self.hits)

    @property
    def terminal(self) -> bool:
        """The server announced it is going down (kill_process_tree, dead scheduler, sigquit)."""
        return bool(self.terminal_lines)

    def best_hit(self) -> Hit | None:
        """Highest priority wins; between equals, the earliest line fed (the first error is the cause)."""
        if not self.hits:
            return None
        return min(self.hits, key=lambda hit: (-hit.rule.priority, hit.order))

    def result(self, gpu_memory: list[dict[str, int]] | None = None) -> Diagnosis:
        best = self.best_hit()
        stage = self.tracker.stage.label
        if best is None:
            found = self._vocabulary_match(stage, gpu_memory)
            if found is None and not self.terminal_lines and self._earlier_diagnosis is not None:
                return self._restarting(self._earlier_diagnosis, stage, gpu_memory)
            return found or self._unknown(stage, gpu_memory)
        rule = best.rule
        capture = self._capture_frame_near(best.order) if rule.cause == "nccl" else None
        if capture is not None:
            return self._inside_capture(best.line, capture, stage, gpu_memory)
        decision = self.decide_phase(best)
        evidence = [hit.line for hit in self.hits if hit.rule.id == rule.id][:MAX_EVIDENCE_LINES_PER_RULE]
        if decision is not None and decision.line is not None:
            evidence.append(decision.line)
        evidence = _ordered_unique([*evidence, *self._context_lines(), *self.terminal_lines])
        notes = [decision.note()] if decision else []
        notes.extend(self._lifetime_notes())
        if rule.confidence == "low":
            notes.append("Suggestive only: confirm before acting on it.")
        phase = decision.phase if decision else None
        return Diagnosis(
            cause=rule.cause,
            phase=phase,
            rule_id=rule.id,
            confidence=rule.confidence,
            fix=rule.fix_for(phase),
            source_url=rule.source,
            stage=stage,
            evidence=evidence,
            notes=notes,
            also_matched=self._also_matched(rule),
            gpu_memory_at_death=gpu_memory,
            rule_evidence=rule.evidence,
            phase_evidence=decision,
        )

    def _restarting(
        self, earlier: Diagnosis, stage: str, gpu_memory: list[dict[str, int]] | None
    ) -> Diagnosis:
        """The latest start shows nothing yet: the crash before it is the diagnosis, said as such."""
        note = (
            f"The server was restarted after this crash and its latest start (stage {stage}) shows no "
            "failure yet: this is the earlier start's diagnosis; a start that crashes the same way again "
            "is a crash loop (bounded restarts stop it)."
        )
        return replace(earlier, notes=[*earlier.notes, note], gpu_memory_at_death=gpu_memory)

    def _is_request_line(self, text: str) -> bool:
        return is_routine(text) or self.phase_evidence.is_request_line(text)

    def decide_phase(self, hit: Hit) -> PhaseDecision | None:
        """Where an OOM happened: the message, the outermost phase frame, the last marker, a forward-pass
        frame, or the stage."""
        if hit.rule.cause != "oom":
            return None
        if hit.rule.phase != "from_context":
            return PhaseDecision(str(hit.rule.phase), "message", hit.line)
        own = self.phase_evidence.frame_phase(hit.line.text)
        if own is not None:
            return PhaseDecision(own, "frame", hit.line)
        # The traceback that led to the line; else one printed after it (exception first, frames after).
        frame = frame_phase(hit.before, self.phase_evidence) or frame_phase(hit.after, self.phase_evidence)
        if (
            frame is not None
            and hit.marker is not None
            and self.phase_evidence.is_per_request_frame(frame[1].text)
            and self.phase_evidence.is_request_line(hit.marker[1].text)
        ):
            # a frame the engine also runs for a request, under a request in flight: the request's
            return PhaseDecision(STAGE_TO_OOM_PHASE[Stage.SERVING], "marker", hit.marker[1])
        if frame is not None:
            return PhaseDecision(frame[0], "frame", frame[1])
        if hit.marker is not None:
            stage, line = hit.marker
            return PhaseDecision(STAGE_TO_OOM_PHASE[STAGE_OF_MARKER[stage]], "marker", line)
        # Requests answered after it: the server outlived the OOM, which a loading, sizing or capture
        # OOM does not allow.
        served = next((line for line in hit.after if self._is_request_line(line.text)), None)
        if served is not None:
            return PhaseDecision(STAGE_TO_OOM_PHASE[Stage.SERVING], "served", served)
        around = (*hit.before, hit.line, *hit.after)
        forward = next((line for line in around if self.phase_evidence.is_forward_frame(line.text)), None)
        if forward is not None:
            return PhaseDecision(self.phase_evidence.forward_phase, "forward", forward)
        by_stage = STAGE_TO_OOM_PHASE[hit.stage]
        # Nothing past loading was reached, but the message's own numbers rule the weights out: an ask
        # larger than the whole GPU is a buffer sized from the configuration (phases.yaml: oversized).
        if by_stage == "weights" and self.phase_evidence.asks_more_than_gpu(hit.line.text):
            return PhaseDecision(self.phase_evidence.oversized_phase, "size", hit.line)
        return PhaseDecision(by_stage, "stage", None)

    def _code_match(
        self, errors: list[tuple[LogLine, int]], stage: str, gpu_memory: list[dict[str, int]] | None
    ) -> Diagnosis | None:
        """Last resort: the last error's traceback runs through one family's code (SGLang's
        disaggregation package, NIXL, torch.distributed, importlib), so the error is that family's,
        whatever its own words (an internal check in the PD transfer code is a KV-transfer failure)."""
        imported = self._import_time_frame(errors)
        if imported is not None:
            frame, last_error = imported
            return self._family_diagnosis(
                self.vocabulary.family("import_error"),
                how=("code", "low"),
                lines=[frame, last_error],
                note=(
                    "No signature matched and no error line uses a family's words; the last error was raised "
                    f"by a module's top-level code while it was being imported (line {frame.line_no}): the "
                    "import failed. Suggestive only, read the error first."
                ),
                rule_evidence="The last error's innermost traceback frame is an imported module's top level.",
                stage=stage,
                gpu_memory=gpu_memory,
            )
        call = self._cut_call(errors)
        if call is not None:
            family, frame = call
            note = (
                f"No signature matched and the log ends inside a traceback, at a call into {family.cause}'s "
                f"code (line {frame.line_no}), before any exception line: suggestive only, find the full "
                "error."
            )
            return self._family_diagnosis(
                family,
                how=("code", "low"),
                lines=[frame],
                note=note,
                rule_evidence=f"The last source line of a cut traceback calls {family.cause}'s code.",
                stage=stage,
                gpu_memory=gpu_memory,
            )
        if not self._code_frames:
            return None
        family, frame, at = self._code_frames[-1]
        # A traceback frame (`line N, in f`), not a thread dump (faulthandler: `line N in f`, all threads).
        in_traceback = TRACEBACK_FRAME_RE.search(frame.text) is not None
        cut = (
            in_traceback and self._fed - at <= CUT_TRACEBACK_TAIL_LINES and (not errors or errors[-1][1] < at)
        )
        if cut:
            # A traceback cut before its exception line (a paste, a log that stops): the innermost frame
            # at the very end is where it failed (flashinfer's check_cuda_arch, SGLang's graph capture).
            last_error = frame
        elif errors:
            last_error, at = errors[-1]
        else:
            return None
        # Only the traceback that led to the error: Python prints it outermost first, right above the
        # exception line, so the innermost family frame decides. Frames printed after an error belong to
        # thread dumps (faulthandler lists every thread) and say nothing about the one that failed.
        window = [entry for entry in self._code_frames if at - TRACEBACK_LOOKBACK_LINES <= entry[2] <= at]
        if not window:
            return None
        family, frame, _ = window[-1]
        cause = family.cause
        if cut:
            note = (
                f"No signature matched and the log ends inside a traceback, in {cause}'s code (line "
                f"{frame.line_no}), before any exception line: suggestive only, find the full error."
            )
        else:
            note = (
                "No signature matched and no error line uses a family's words; the traceback of the last "
                f"error runs through {cause}'s code (line {frame.line_no}): suggestive only, read the "
                "error first."
            )
        return self._family_diagnosis(
            family,
            how=("code", "low"),
            lines=[frame, last_error],
            note=note,
            rule_evidence=f"A traceback frame in {cause}'s code under the last error line.",
            stage=stage,
            gpu_memory=gpu_memory,
        )

    def _capture_frame_near(self, order: int) -> LogLine | None:
        """A capture frame in the traceback around the error fed at `order` (frames are printed before
        the exception line, or after a logger's one-line summary of it)."""
        for frame, at in reversed(self._capture_frames):
            if order - TRACEBACK_LOOKBACK_LINES <= at <= order + TRACEBACK_LOOKAHEAD_LINES:
                return frame
        return None

    def _inside_capture(
        self, error: LogLine, frame: LogLine, stage: str, gpu_memory: list[dict[str, int]] | None
    ) -> Diagnosis:
        """A collective that failed in a traceback through CUDA-graph capture code: the capture's failure
        (the corpus's convention, as for a collective inside SGLang's "Capture cuda graph failed" wrapper)."""
        return self._family_diagnosis(
            self.vocabulary.family("cuda_graph_capture"),
            how=("code", "medium"),
            lines=[error, frame],
            note=(
                f"A collective failed (line {error.line_no}) in a traceback through CUDA-graph capture code "
                f"(line {frame.line_no}): the capture's failure, as inside SGLang's capture wrapper; if the "
                "same collective also fails with --disable-cuda-graph, the transport is the cause."
            ),
            rule_evidence="A collective's error in a traceback through a CUDA-graph capture frame.",
            stage=stage,
            gpu_memory=gpu_memory,
        )

    def _cut_call(self, errors: list[tuple[LogLine, int]]) -> tuple[VocabularyFamily, LogLine] | None:
        """A traceback cut right under a source line that calls a family's code ("cuda_graph_runner.capture(
        ...)" and nothing after): that call is where it failed, unless a family's own frame came later."""
        if self._last_call is None:
            return None
        family, frame, at = self._last_call
        if self._fed - at > CUT_TRACEBACK_TAIL_LINES - 1 or (errors and errors[-1][1] >= at):
            return None
        if self._code_frames and self._code_frames[-1][2] > at:
            return None
        return family, frame

    def _import_time_frame(self, errors: list[tuple[LogLine, int]]) -> tuple[LogLine, LogLine] | None:
        """The innermost frame of the last error's traceback, when it is a module's top level ("in
        <module>") below other frames: code that runs only because something imported it. (The
        outermost <module> is the script itself; runpy's `python -m` runs a module's top level too.)"""
        if not errors or len(self._traceback_frames) < 2:
            return None
        last_error, at = errors[-1]
        frames = [(line, order) for line, order in self._traceback_frames if order < at]
        if len(frames) < 2 or at - frames[-1][1] > CUT_TRACEBACK_TAIL_LINES + 2:
            return None
        innermost, caller = frames[-1][0], frames[-2][0]
        if not innermost.text.rstrip().endswith("in <module>") or "runpy.py" in caller.text:
            return None
        return innermost, last_error

    def _family_diagnosis(
        self,
        family: VocabularyFamily,
        *,
        how: tuple[str, str],
        lines: list[LogLine],
        note: str,
        rule_evidence: str,
        stage: str,
        gpu_memory: list[dict[str, int]] | None,
    ) -> Diagnosis:
        """A family named without a signature (`how`: rule-id prefix and confidence): by its words or code."""
        prefix, confidence = how
        return Diagnosis(
            cause=family.cause,
            phase=None,
            rule_id=f"{prefix}-{family.cause}",
            confidence=confidence,
            fix=family.fix,
            source_url=None,
            stage=stage,
            evidence=_ordered_unique([*lines, *self._context_lines(), *self.terminal_lines]),
            notes=[note, *self._lifetime_notes()],
            gpu_memory_at_death=gpu_memory,
            rule_evidence=rule_evidence,
            last_lines=list(self._meaningful),
        )

    def _lifetime_notes(self) -> list[str]:
        if not self.earlier_lifetimes:
            return []
        causes = ", ".join(f"{cause} x{n}" for cause, n in Counter(self.earlier_crashes).most_common())
        return [
            f"The log holds {self.earlier_lifetimes} earlier server start(s) that went down "
            f"({causes}); this diagnosis is of the last one."
        ]

    def _context_lines(self) -> list[LogLine]:
        return [self._last_milestone] if self._last_milestone is not None else []

    def _also_matched(self, winner: Rule) -> list[dict[str, Any]]:
        seen: dict[str, Hit] = {}
        for hit in self.hits:
            if hit.rule.id != winner.id and hit.rule.id not in seen:
                seen[hit.rule.id] = hit
        return [
            {
                "rule_id": hit.rule.id,
                "cause": hit.rule.cause,
                "line_no": hit.line.line_no,
                "source": hit.line.source,
            }
            for hit in list(seen.values())[:MAX_ALSO_MATCHED]
        ]

    def _vocabulary_match(self, stage: str, gpu_memory: list[dict[str, int]] | None) -> Diagnosis | None:
        """No signature matched: the family whose own words the error lines use, if any (never OOM)."""
        errors = list(zip(self._error_lines, self._error_order, strict=True))
        if self.tracker.ready and not self.terminal_lines:
            # A server that came up and never went down: only errors after it came up say anything
            # (a PD KV transfer or a collective failing per request while /health stays 200).
            ready_at = self._ready_at or 0
            errors = [(line, order) for line, order in errors if order > ready_at]
        error_lines = [line for line, _ in errors]
        fault_at = next(
            (index for index, line in enumerate(error_lines) if self.vocabulary.fault([line])), None
        )
        if fault_at is not None:
            # A CUDA fault names no cause and what follows it is its echo; but a family's own refusal
            # printed before it ("This kernel is not supported on your GPU", then "unspecified launch
            # failure") is the first error, and the fault its consequence. C++'s "terminate called after
            # throwing an instance of 'c10::DistBackendError'" right before the fault is no refusal: it
            # announces the exception whose what() line is the fault.
            if fault_at and THROWN_INSTANCE_RE.search(error_lines[fault_at - 1].text):
                fault_at -= 1
            error_lines = error_lines[:fault_at]
        # Where the log says ERROR (or raised), its warnings are notes, not the failure's words.
        errors_proper = [line for line in error_lines if not is_warning_only(line.text)]
        found = self.vocabulary.classify(
            errors_proper or error_lines,
            first=lambda line: self._yielded.get((line.source, line.line_no, line.text), frozenset()),
        )
        if found is None:
            return None if fault_at is not None else self._code_match(errors, stage, gpu_memory)
        family, lines = found
        order_of = {id(line): order for line, order in errors}
        capture = self._capture_frame_near(order_of.get(id(lines[-1]), 0)) if family.cause == "nccl" else None
        if capture is not None:
            return self._inside_capture(lines[-1], capture, stage, gpu_memory)
        note = (
            f"No specific signature matched; {len(lines)} error line(s) use the {family.cause} family's "
            "vocabulary: read them first, the cause is in their words."
        )
        return self._family_diagnosis(
            family,
            how=("vocabulary", "medium"),
            lines=lines[-MAX_EVIDENCE_LINES_PER_RULE:],
            note=note,
            rule_evidence=family.evidence,
            stage=stage,
            gpu_memory=gpu_memory,
        )

    def _unknown(self, stage: str, gpu_memory: list[dict[str, int]] | None) -> Diagnosis:
        if self._fed == 0:
            opening = UNKNOWN_EMPTY
        elif self.terminal_lines:
            opening = UNKNOWN_KILLED
        else:
            opening = UNKNOWN_NO_END
        notes = [*opening, *UNKNOWN_NOTES, *self._lifetime_notes()]
        fault = self.vocabulary.fault(list(self._error_lines))
        if fault is not None:
            notes.insert(0, self.vocabulary.abstain_note.format(fault=fault))
        if gpu_memory is None:
            notes.append("GPU memory at death was not recorded (no nvidia-smi here, or an offline log).")
        return Diagnosis(
            cause="unknown",
            phase=None,
            rule_id=None,
            confidence="low",
            fix=None,
            source_url=None,
            stage=stage,
            evidence=_ordered_unique([*self._context_lines(), *self.terminal_lines]),
            notes=notes,
            gpu_memory_at_death=gpu_memory,
            last_lines=list(self._meaningful),
        )


def _ordered_unique(lines: Iterable[LogLine]) -> list[LogLine]:
    unique = {(line.source, line.line_no): line for line in lines}
    return [unique[key] for key in sorted(unique)]


def runs_newest_first(texts: Iterable[str]) -> bool:
    """order's test on each line's innermost stamp: the one the process wrote, under whatever carried it
    (compose's "sglang-1  | ", Ray's worker tag), or, on a line the process stamped not, the carrier's own
    (journald's, `kubectl logs --timestamps`'), kept apart from the process's even in the same format. A
    carrier writes lines in the order they came, so its stamps step forward while a newest-first copy it
    carried steps back. A paste that lost its newlines is read as the lines it joined, as feed reads it."""

    def innermost(pieces: list[str], written: str) -> tuple[str, tuple[int, ...]] | None:
        if (found := order.stamp(written)) is not None:
            return found
        # a carrier's stamp (and the process's own, where the stamp pattern took it for a shipper's)
        for piece in reversed(pieces):
            if (found := order.stamp(piece)) is not None:
                return f"carried {found[0]}", found[1]
        return None

    def stamps() -> Iterator[tuple[str, tuple[int, ...]] | None]:
        for text in texts:
            pieces, written = carrier_pieces(text.rstrip())
            joined = flattened_lines(pieces, written)
            if joined is None:
                yield innermost(pieces, written)
            else:
                for carrier, part in joined:
                    # (a joined line's carrier may hold a line that was a stamp alone: RunPod's console)
                    carried, rest = carrier_pieces(carrier)
                    yield innermost([*carried, rest], part)

    return order.stamps_run_back(stamps())


def diagnose_lines(lines: Iterable[LogLine], gpu_memory: list[dict[str, int]] | None = None) -> Diagnosis:
    """Offline: classify a whole log, read oldest first whichever way it was written (order.py)."""
    ordered = list(lines)
    newest_first = runs_newest_first(line.text for line in ordered[: order.SAMPLE_LINES])
    diagnoser = Diagnoser()
    diagnoser.newest_first = newest_first
    diagnoser.feed_all(reversed(ordered) if newest_first else ordered)
    diagnosis = diagnoser.result(gpu_memory)
    if newest_first:
        diagnosis.notes.append(order.NEWEST_FIRST_NOTE)
    return diagnosis


def numbered(texts: Iterable[str], source: str = "log") -> list[LogLine]:
    """Number raw lines from 1, stripping line endings."""
    return [LogLine(index, text.rstrip("\r\n"), source) for index, text in enumerate(texts, start=1)]


def stream_lines(
    handle: IO[str] | order.Replayed, source: str, max_chars: int = READ_LINE_MAX
) -> Iterator[LogLine]:
    """Number a file's lines as they are read, in constant memory: a longer line keeps its head
    and the rest of it is skipped, never held."""
    line_no = 0
    while True:
        chunk = handle.readline(max_chars)
        if not chunk:
            return
        line_no += 1
        text = chunk
        while not chunk.endswith("\n"):
            chunk = handle.readline(max_chars)
            if not chunk:
                break
        yield LogLine(line_no, text.rstrip("\r\n"), source)


def stream_oldest_first(
    handle: IO[str], source: str, reopen: Callable[[], BinaryIO] | None = None, max_chars: int = READ_LINE_MAX
) -> tuple[Iterator[LogLine], BinaryIO | None]:
    """A log's lines oldest first, numbered as written, in bounded memory. A newest-first log (order.py) is
    read backwards: from `reopen()` (the same file opened in binary), or, for a stream that cannot seek,
    from a temporary copy. Returns the lines and the binary handle they come from (None when read forward),
    which the caller closes once the lines are read."""
    head = order.read_head(handle, max_chars)
    if not runs_newest_first(head):
        return stream_lines(order.Replayed(head, handle), source, max_chars), None
    binary = reopen() if reopen is not None else order.spooled(head, handle)
    lines = (LogLine(line_no, text, source) for line_no, text in order.lines_backwards(binary, max_chars))
    return lines, binary


Runner = Callable[[list[str]], str]


def _run_nvidia_smi(command: list[str]) -> str:
    return subprocess.run(
        command, capture_output=True, text=True, check=True, timeout=NVIDIA_SMI_TIMEOUT_S
    ).stdout


def read_gpu_memory(runner: Runner | None = None) -> list[dict[str, int]] | None:
    """Per-GPU memory now, from nvidia-smi; None where nvidia-smi is absent or fails."""
    if runner is None:
        if shutil.which("nvidia-smi") is None:
            return None
        runner = _run_nvidia_smi
    command = ["nvidia-smi", "--query-gpu=index,memory.used,memory.total", "--format=csv,noheader,nounits"]
    try:
        output = runner(command)
    except (OSError, subprocess.SubprocessError):
        return None
    gpus = []
    for row in output.strip().splitlines():
        fields = [value.strip() for value in row.split(",")]
        if len(fields) != 3 or not all(value.isdigit() for value in fields):
            return None
        index, used, total = (int(value) for value in fields)
        gpus.append({"index": index, "used_mib": used, "total_mib": total})
    return gpus or None
