"""`sglnode wait`'s engine: follow the log and poll readiness until the first terminal event.

Terminal events: the server is ready (probe or "ready to roll" line), a conclusive fatal line,
`kill_process_tree called` (after a short grace for the cause lines other ranks print around
it), the process/container/unit exiting, or the timeout. Everything arrives on one queue from
worker threads, so a slow HTTP probe never delays the reaction to a log line.
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, Protocol

from sglnode.diagnosis.diagnose import (
    UNKNOWN_KILLED,
    UNKNOWN_NO_END,
    Diagnoser,
    Diagnosis,
    LogLine,
    read_gpu_memory,
)
from sglnode.interrupts import Interrupted, signal_exit_code
from sglnode.readiness.client import DEFAULT_TIMEOUT_S as DEFAULT_PROBE_TIMEOUT_S
from sglnode.readiness.client import Probe, Readiness, SGLangClient
from sglnode.readiness.logwatch import ExitInfo, LogEvent
from sglnode.readiness.startup import Milestone, ProgressDisplay, ProgressTracker

SCHEMA_VERSION = 1
# A conclusive line is reported after this settle time, so the lines written in the same burst
# (the rest of the traceback, other ranks, the kill line) make it into the evidence.
CONCLUSIVE_SETTLE_S = 0.15
# `kill_process_tree called` alone: ranks may print the real cause just before or after it.
KILL_GRACE_S = 0.5
# GPU memory at death is read in parallel with the grace period; never wait longer than this for it.
GPU_MEMORY_JOIN_S = 0.25
# Readiness polling: short first, then back off (the "short backoff").
PROBE_FIRST_INTERVAL_S = 0.25
PROBE_MAX_INTERVAL_S = 2.0
# A server that answered HTTP and then stops answering this many probes in a row has died.
LOST_AFTER_UNREACHABLE_PROBES = 3
THREAD_JOIN_S = 2.0
PROBE_THREAD_JOIN_S = 0.1
# How often a wait run in a thread looks at its cancel event.
CANCEL_POLL_S = 0.2
LOG_THREAD = "sglnode-wait-log"
# Without a log to follow, a URL where nothing listens (connection refused) for this long ends the
# wait as unreachable (exit 4) instead of after the whole --timeout. SGLang opens its HTTP port only
# after weights, KV cache and CUDA graphs, so a cold start needs a log source or a larger grace.
DEFAULT_CONNECT_GRACE_S = 120.0
# How often "connection refused at URL" (or "no answer") is repeated while it lasts.
REACHABILITY_NOTE_INTERVAL_S = 10.0
# When the probe answers ready before the followed log has caught up (a wait started after the
# server, replaying its log), read on this long at most for the startup milestones still in flight.
LOG_CATCHUP_S = 1.0


class Outcome(StrEnum):
    READY = "ready"
    CRASHED = "crashed"
    TIMED_OUT = "timed_out"
    UNREACHABLE = "unreachable"
    INTERRUPTED = "interrupted"  # SIGINT/SIGTERM: exit 130/143


EXIT_CODES: dict[Outcome, int] = {
    Outcome.READY: 0,
    Outcome.CRASHED: 2,
    Outcome.TIMED_OUT: 3,
    Outcome.UNREACHABLE: 4,
}


class Follower(Protocol):
    name: str

    def follow(self, stop: threading.Event) -> Iterator[LogEvent]: ...

    def exit_info(self) -> ExitInfo | None: ...


@dataclass
class WaitOptions:
    url: str | None
    follower: Follower | None
    timeout_s: float
    pd: bool = False
    connect_grace_s: float = DEFAULT_CONNECT_GRACE_S
    probe_timeout_s: float = DEFAULT_PROBE_TIMEOUT_S
    # Set by a caller that runs waits in threads (the rollout check) to end them on Ctrl-C/SIGTERM.
    cancel: threading.Event | None = None
    cancel_reason: str = "SIGINT"
    gpu_memory_reader: Callable[[], list[dict[str, int]] | None] = read_gpu_memory


@dataclass
class WaitResult:
    outcome: Outcome
    elapsed_s: float
    stage: str
    milestones: list[Milestone] = field(default_factory=list)
    diagnosis: Diagnosis | None = None
    probe: Probe | None = None
    process_exit: ExitInfo | None = None
    log_source: str | None = None
    url: str | None = None
    # What the URL did: "answered" (HTTP), "no_answer" (accepts connections, never answers HTTP),
    # "refused" (nothing listening, or unknown host); None without --url or before the first probe.
    reachability: str | None = None
    interrupted: str | None = None  # "SIGINT" | "SIGTERM"

    @property
    def exit_code(self) -> int:
        if self.outcome is Outcome.INTERRUPTED:
            return signal_exit_code(self.interrupted or "SIGINT")
        return EXIT_CODES[self.outcome]

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "outcome": self.outcome.value,
            "exit_code": self.exit_code,
            "elapsed_s": round(self.elapsed_s, 3),
            "stage": self.stage,
            "milestones": [
                {
                    "stage": milestone.stage.label,
                    "elapsed_s": round(milestone.elapsed_s, 3),
                    "line_no": milestone.line_no,
                    "text": milestone.text,
                }
                for milestone in self.milestones
            ],
            "diagnosis": self.diagnosis.to_json() if self.diagnosis else None,
            "probe": (
                {
                    "endpoint": self.probe.endpoint,
                    "status": self.probe.status,
                    "readiness": self.probe.readiness.value,
                    "detail": self.probe.detail,
                }
                if self.probe
                else None
            ),
            "process_exit": (
                {"exit_code": self.process_exit.exit_code, "detail": self.process_exit.detail}
                if self.process_exit
                else None
            ),
            "log_source": self.log_source,
            "url": self.url,
            "reachability": self.reachability,
            "interrupted": self.interrupted,
        }


@dataclass(frozen=True)
class _StreamEnd:
    info: ExitInfo | None


def _read_log(follower: Follower, events: queue.Queue[object], stop: threading.Event) -> None:
    try:
        for event in follower.follow(stop):
            events.put(event)
    except OSError as error:  # e.g. docker/journalctl missing: say so instead of waiting for the timeout
        events.put(_StreamEnd(ExitInfo(None, f"cannot follow {follower.name}: {error}")))
        return
    if not stop.is_set():
        events.put(_StreamEnd(follower.exit_info()))


def _poll_readiness(
    client: SGLangClient, pd: bool, events: queue.Queue[object], stop: threading.Event
) -> None:
    interval = PROBE_FIRST_INTERVAL_S
    while not stop.is_set():
        try:
            probe = client.readiness(pd=pd)
        except Exception as error:  # a probe must never kill its thread and leave the wait blind
            probe = Probe(Readiness.UNREACHABLE, "probe", None, f"probe failed: {error!r}"[:300])
        events.put(probe)
        if probe.readiness is Readiness.READY:
            return
        stop.wait(interval)
        interval = min(interval * 2, PROBE_MAX_INTERVAL_S)


class _GpuMemorySnapshot:
    """Reads GPU memory in a thread the moment the server starts dying."""

    def __init__(self, reader: Callable[[], list[dict[str, int]] | None]) -> None:
        self.value: list[dict[str, int]] | None = None
        self._thread = threading.Thread(target=self._run, args=(reader,), daemon=True)
        self._thread.start()

    def _run(self, reader: Callable[[], list[dict[str, int]] | None]) -> None:
        self.value = reader()

    def get(self) -> list[dict[str, int]] | None:
        self._thread.join(GPU_MEMORY_JOIN_S)
        return self.value


def wait_for_server(options: WaitOptions, display: ProgressDisplay | None = None) -> WaitResult:
    """Block until the server is ready, has crashed, or the timeout passes."""
    return _WaitLoop(options, display).run()


class _WaitLoop:
    """One `sglnode wait`: worker threads feed `events`; this thread decides."""

    def __init__(self, options: WaitOptions, display: ProgressDisplay | None) -> None:
        self.options = options
        self.display = display
        self.started = time.monotonic()
        self.deadline = self.started + options.timeout_s
        self.events: queue.Queue[object] = queue.Queue()
        self.stop = threading.Event()
        self.tracker = ProgressTracker(started_at=self.started)
        self.diagnoser = Diagnoser(tracker=self.tracker)
        self.source = options.follower.name if options.follower is not None else "log"
        self.conclude_at: float | None = None
        self.ready_at: float | None = None
        self.snapshot: _GpuMemorySnapshot | None = None
        self.last_probe: Probe | None = None
        self.process_exit: ExitInfo | None = None
        self.heard_http = False
        self.accepted = False  # the port took a connection (even if no HTTP answer came)
        self.last_note_at: float | None = None
        self.last_note_kind: Readiness | None = None
        self.unreachable_streak = 0
        self.saw_lines = False
        self.workers: list[threading.Thread] = []

    def run(self) -> WaitResult:
        try:
            return self._run()
        except Interrupted as signal:
            return self._finish(Outcome.INTERRUPTED, interrupted=signal.name)

    def _run(self) -> WaitResult:
        self._start_workers()
        cancel = self.options.cancel
        while True:
            now = time.monotonic()
            if cancel is not None and cancel.is_set():
                return self._finish(Outcome.INTERRUPTED, interrupted=self.options.cancel_reason)
            if self.conclude_at is not None and now >= self.conclude_at:
                return self._crash()
            if self.ready_at is not None and now >= self.ready_at:
                return self._finish(Outcome.READY)
            if now >= self.deadline:
                return self._timeout()
            until = min(t for t in (self.deadline, self.conclude_at, self.ready_at) if t is not None)
            if cancel is not None:
                until = min(until, now + CANCEL_POLL_S)
            try:
                event = self.events.get(timeout=max(0.0, until - now))
            except queue.Empty:
                continue
            outcome = self._handle(event, time.monotonic())
            if outcome is not None:
                return self._finish(outcome)

    def _start_workers(self) -> None:
        if self.options.follower is not None:
            self.workers.append(
                threading.Thread(
                    target=_read_log,
                    args=(self.options.follower, self.events, self.stop),
                    daemon=True,
                    name=LOG_THREAD,
                )
            )
        if self.options.url is not None:
            client = SGLangClient(self.options.url, timeout=self.options.probe_timeout_s)
            self.workers.append(
                threading.Thread(
                    target=_poll_readiness,
                    args=(client, self.options.pd, self.events, self.stop),
                    daemon=True,
                )
            )
        for worker in self.workers:
            worker.start()

    def _handle(self, event: object, now: float) -> Outcome | None:
        """Apply one event; return an outcome when it ends the wait right away."""
        if isinstance(event, LogEvent):
            return self._on_line(event, now)
        if isinstance(event, _StreamEnd):
            self.process_exit = event.info
            self._conclude(now)  # every line of the stream was queued before its end
        elif isinstance(event, Probe):
            return self._on_probe(event, now)
        return None

    def _on_line(self, event: LogEvent, now: float) -> Outcome | None:
        self.saw_lines = True
        known = len(self.tracker.milestones)
        self.diagnoser.feed(LogLine(event.line_no, event.line, self.source), event.timestamp)
        if self.display is not None and len(self.tracker.milestones) > known:
            self.display.show(self.tracker.milestones[-1])
        if self.tracker.ready and not self.options.pd:
            # With --pd the line only updates progress: readiness is a generation through the router.
            return Outcome.READY
        if self.diagnoser.conclusive:
            self._conclude(now + CONCLUSIVE_SETTLE_S)
        elif self.diagnoser.terminal and self.conclude_at is None:
            self._conclude(now + KILL_GRACE_S)
        return None

    def _on_probe(self, probe: Probe, now: float) -> Outcome | None:
        self.last_probe = probe
        if probe.readiness is Readiness.READY:
            if self.options.follower is None or self.tracker.ready:
                return Outcome.READY
            if self.ready_at is None:
                self.ready_at = now + LOG_CATCHUP_S
            return None
        if probe.readiness is Readiness.STARTING:
            self.heard_http = True
            self.accepted = True
            self.unreachable_streak = 0
            return None
        if probe.readiness is Readiness.NO_ANSWER:
            self.accepted = True
        self._note_unanswered(probe, now)
        self.unreachable_streak += 1
        lost = self.heard_http and self.unreachable_streak >= LOST_AFTER_UNREACHABLE_PROBES
        if lost and self.conclude_at is None:
            self.process_exit = ExitInfo(None, f"server stopped answering at {self.options.url}")
            self._conclude(now)
        nothing_listens = not self.heard_http and not self.accepted
        grace_over = now - self.started >= self.options.connect_grace_s
        if self.options.follower is None and nothing_listens and grace_over:
            return Outcome.UNREACHABLE
        return None

    def _note_unanswered(self, probe: Probe, now: float) -> None:
        """Say at once, and every few seconds while it lasts, that the URL is not answering."""
        if self.display is None:
            return
        due = self.last_note_at is None or now - self.last_note_at >= REACHABILITY_NOTE_INTERVAL_S
        if not due and probe.readiness is self.last_note_kind:
            return
        self.last_note_at, self.last_note_kind = now, probe.readiness
        self.display.note(f"[{now - self.started:7.1f}s] {self.options.url}: {probe.detail}")

    def _conclude(self, at: float) -> None:
        """Report a crash at `at` (or earlier if already due); start reading GPU memory now."""
        self.conclude_at = at if self.conclude_at is None else min(self.conclude_at, at)
        if self.snapshot is None:
            self.snapshot = _GpuMemorySnapshot(self.options.gpu_memory_reader)

    def _crash(self) -> WaitResult:
        if self.process_exit is not None:
            self.diagnoser.feed(LogLine(1, self.process_exit.detail, "exit"))
        gpu_memory = self.snapshot.get() if self.snapshot is not None else None
        diagnosis = self.diagnoser.result(gpu_memory)
        if not self.saw_lines and diagnosis.cause == "unknown":
            # An empty log proves nothing about a kill: say what is known instead.
            # (the opening unknown-cause notes speak of a kill line or of the log's lines)
            diagnosis.notes = [n for n in diagnosis.notes if n not in (*UNKNOWN_KILLED, *UNKNOWN_NO_END)]
            diagnosis.notes.insert(
                0, f"the log ({self.source}) held no lines: nothing in it says how the process ended"
            )
        if self.process_exit is not None:
            diagnosis.notes.insert(0, f"process exit: {self.process_exit.detail}")
        return self._finish(Outcome.CRASHED, diagnosis)

    def _timeout(self) -> WaitResult:
        # "Nothing listening" needs evidence: a probe that was refused (a probe still in flight
        # proves nothing), or no URL to probe at all.
        probed = self.options.url is None or self.last_probe is not None
        if probed and not self.saw_lines and not self.heard_http and not self.accepted:
            return self._finish(Outcome.UNREACHABLE)
        return self._finish(Outcome.TIMED_OUT, self.diagnoser.result() if self.diagnoser.hits else None)

    def _reachability(self) -> str | None:
        if self.options.url is None or self.last_probe is None:
            return None
        if self.heard_http or self.last_probe.readiness is Readiness.READY:
            return "answered"
        return "no_answer" if self.accepted else "refused"

    def _finish(
        self, outcome: Outcome, diagnosis: Diagnosis | None = None, interrupted: str | None = None
    ) -> WaitResult:
        self.stop.set()
        for worker in self.workers:
            # The log thread ends the child it reads (docker logs -f, journalctl -f): wait for it.
            # A probe in flight holds nothing and stops after its answer; never wait out its timeout.
            worker.join(THREAD_JOIN_S if worker.name == LOG_THREAD else PROBE_THREAD_JOIN_S)
        return WaitResult(
            outcome=outcome,
            elapsed_s=time.monotonic() - self.started,
            stage=self.tracker.stage.label,
            milestones=list(self.tracker.milestones),
            diagnosis=diagnosis,
            probe=self.last_probe,
            process_exit=self.process_exit,
            log_source=self.options.follower.name if self.options.follower is not None else None,
            url=self.options.url,
            reachability=self._reachability(),
            interrupted=interrupted,
        )
