"""Apply the failure rules to log lines, pick the cause, and gather the evidence.

The same `Diagnoser` serves `sglnode diagnose` (offline, whole files) and `sglnode wait` (live,
line by line): it says when the log is already conclusive, so `wait` can report within a second
of the fatal line instead of waiting for the process to exit.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from sglnode import loglines
from sglnode.progress import STAGE_TO_OOM_PHASE, ProgressTracker, Stage
from sglnode.rulebook import Rule, load_rules

SCHEMA_VERSION = 1

# How far back (lines) to look for the traceback that led to an OOM line. SGLang scheduler
# tracebacks are ~20-60 frames; 400 lines also covers a few interleaved ranks.
TRACEBACK_LOOKBACK_LINES = 400
MAX_EVIDENCE_LINES_PER_RULE = 5
MAX_ALSO_MATCHED = 10
NVIDIA_SMI_TIMEOUT_S = 5.0

TRACEBACK_START_RE = re.compile(r"Traceback \(most recent call last\)")
# Frames (or message text) that place an allocation in a startup phase. Checked in this order:
# the serving loop first (its frames never appear during init), then graph capture (not replay,
# which is serving), then the KV pool, then weights.
PHASE_HINTS: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "runtime",
        re.compile(r"event_loop_(?:normal|overlap)|in run_batch\b|process_batch_result|forward_thread_func"),
    ),
    (
        "cuda_graph",
        re.compile(
            r"Capture cuda graph failed|init_cuda_graphs|init_device_graphs|capture_one_batch_size"
            r"|in capture\b|Capturing batches|graph_runner\.py\", line \d+, in (?:__init__|capture)"
        ),
    ),
    (
        "kv_cache",
        re.compile(
            r"init_memory_pool|profile_max_num_token|_profile_available_bytes|memory_pool\.py"
            r"|pool_configurator\.py|_create_buffers|ReqToTokenPool"
        ),
    ),
    ("weights", re.compile(r"load_model|load_weights|weight_loader|create_weights|model_loader")),
)
# Lines that mean the server is going down, whatever the cause.
TERMINAL_RES: tuple[re.Pattern[str], ...] = (
    loglines.KILL_PROCESS_TREE_RE,
    loglines.SCHEDULER_DEAD_RE,
    re.compile(r"Received sigquit from a child process"),
    re.compile(r"SIGQUIT received"),
    loglines.SCHEDULER_DIED_RE,
)

# SGLang's high-volume serving lines (per-batch stats, HTTP access log) never carry a failure or a
# startup milestone; skipping them keeps offline diagnosis of day-long logs fast (~10x).
ROUTINE_LINE_MARKERS: tuple[str, ...] = ("] Decode batch", "] Prefill batch", '" 200 OK')

UNKNOWN_NOTES: tuple[str, ...] = (
    "No failure signature matched: the server was killed without a recognisable cause in this log.",
    "Look at the rank-0 scheduler output above the kill line: the first 'Scheduler hit an exception' "
    "or 'Traceback' block names the real error (other ranks often print only the kill).",
    "Check the kernel log for the host OOM killer or GPU faults: dmesg -T | grep -iE 'killed process|xid'.",
    "Compare GPU memory at death (gpu_memory_at_death, or nvidia-smi right after the crash) with "
    "the last 'avail mem=' line of the log.",
)


@dataclass(frozen=True)
class LogLine:
    """One line of a log, numbered from 1 within its source."""

    line_no: int
    text: str
    source: str = "log"

    def to_json(self) -> dict[str, Any]:
        return {"line_no": self.line_no, "text": self.text, "source": self.source}


@dataclass(frozen=True)
class Hit:
    """A rule that matched a line, and where the server was at that moment."""

    rule: Rule
    line: LogLine
    stage: Stage
    context_phase: str | None
    order: int  # position in the feed, across all sources


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

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "cause": self.cause,
            "phase": self.phase,
            "rule_id": self.rule_id,
            "confidence": self.confidence,
            "fix": self.fix,
            "source_url": self.source_url,
            "stage": self.stage,
            "evidence": [line.to_json() for line in self.evidence],
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
        lines.extend(f"  {line.source}:{line.line_no}: {line.text}" for line in self.evidence)
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


def context_phase(recent: Iterable[LogLine], hit_line: LogLine) -> str | None:
    """The phase named by the traceback that ends at `hit_line` (None when frames say nothing)."""
    window = list(recent)
    start = 0
    for index in range(len(window) - 1, -1, -1):
        if TRACEBACK_START_RE.search(window[index].text):
            start = index
            break
    else:
        window = []  # no traceback: only the fatal line itself can name the phase
    texts = [line.text for line in window[start:]] + [hit_line.text]
    for phase, pattern in PHASE_HINTS:
        if any(pattern.search(text) for text in texts):
            return phase
    return None


class Diagnoser:
    """Feeds on log lines; knows when the log is conclusive and what it concludes."""

    def __init__(self, rules: tuple[Rule, ...] | None = None, tracker: ProgressTracker | None = None) -> None:
        self.rules = rules if rules is not None else load_rules()
        self.tracker = tracker if tracker is not None else ProgressTracker(started_at=0.0)
        self.hits: list[Hit] = []
        self.terminal_lines: list[LogLine] = []
        self._recent: deque[LogLine] = deque(maxlen=TRACEBACK_LOOKBACK_LINES)
        self._last_milestone: LogLine | None = None
        self._fed = 0

    def feed(self, line: LogLine, timestamp: float = 0.0) -> list[Hit]:
        """Classify one line; return the rule hits it produced."""
        self._fed += 1
        if any(marker in line.text for marker in ROUTINE_LINE_MARKERS):
            self._recent.append(line)
            return []
        if self.tracker.feed(timestamp, line.line_no, line.text) is not None:
            self._last_milestone = line
        new_hits = []
        for rule in self.rules:
            if rule.matches(line.text):
                stage = self.tracker.stage_of(loglines.tp_rank(line.text))
                phase = context_phase(self._recent, line) if rule.phase == "from_context" else None
                new_hits.append(Hit(rule, line, stage, phase, order=self._fed))
        self.hits.extend(new_hits)
        if any(pattern.search(line.text) for pattern in TERMINAL_RES):
            self.terminal_lines.append(line)
        self._recent.append(line)
        return new_hits

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
            return self._unknown(stage, gpu_memory)
        rule = best.rule
        phase, phase_note = self._phase(best)
        evidence = [hit.line for hit in self.hits if hit.rule.id == rule.id][:MAX_EVIDENCE_LINES_PER_RULE]
        evidence = _ordered_unique([*evidence, *self._context_lines(), *self.terminal_lines])
        notes = [phase_note] if phase_note else []
        if rule.confidence == "low":
            notes.append("Suggestive only: confirm before acting on it.")
        also = self._also_matched(rule)
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
            also_matched=also,
            gpu_memory_at_death=gpu_memory,
        )

    def _phase(self, hit: Hit) -> tuple[str | None, str | None]:
        if hit.rule.cause != "oom":
            return None, None
        if hit.rule.phase != "from_context":
            return hit.rule.phase, f"phase {hit.rule.phase}: named by the error message itself"
        if hit.context_phase is not None:
            return hit.context_phase, f"phase {hit.context_phase}: from the traceback frames before the error"
        phase = STAGE_TO_OOM_PHASE[hit.stage]
        return phase, f"phase {phase}: from the last startup stage seen ({hit.stage.label})"

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

    def _unknown(self, stage: str, gpu_memory: list[dict[str, int]] | None) -> Diagnosis:
        notes = list(UNKNOWN_NOTES)
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
        )


def _ordered_unique(lines: Iterable[LogLine]) -> list[LogLine]:
    unique = {(line.source, line.line_no): line for line in lines}
    return [unique[key] for key in sorted(unique)]


def diagnose_lines(lines: Iterable[LogLine], gpu_memory: list[dict[str, int]] | None = None) -> Diagnosis:
    """Offline: classify a whole log."""
    diagnoser = Diagnoser()
    diagnoser.feed_all(lines)
    return diagnoser.result(gpu_memory)


def numbered(texts: Iterable[str], source: str = "log") -> list[LogLine]:
    """Number raw lines from 1, stripping line endings."""
    return [LogLine(index, text.rstrip("\r\n"), source) for index, text in enumerate(texts, start=1)]


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
