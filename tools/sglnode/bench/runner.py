"""Runs load stages across one or more worker processes and merges what they measured.

One process per `--workers`: a Python event loop is single-threaded, so the client ceiling
scales with processes, not with tasks. perf_counter is CLOCK_MONOTONIC on Linux, shared by all
processes of the machine, so records from different workers share one time axis.

Signals: with one worker the stage runs in this process and stops itself on SIGINT/SIGTERM. With
several, the workers ignore SIGINT (Ctrl-C reaches the whole process group; the parent decides),
the parent turns a signal into `Interrupted` (sglnode.interrupts), sends SIGTERM to every worker
(each stops gracefully and sends what it measured), collects for WORKER_STOP_GRACE_S, then kills
and joins whatever is left. A worker whose parent dies stops on its own (loadgen, parent watch).
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import os
import queue
import signal
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Any

from sglnode.bench.loadgen import StageShare, Target, WorkerResult, run_share
from sglnode.interrupts import HANDLED_SIGNALS, Interrupted

# How often the progress bar refreshes.
PROGRESS_INTERVAL_S = 0.25
# Slack beyond duration + request timeout before a silent worker process is killed.
WORKER_GRACE_S = 15.0
# After SIGTERM, how long workers get to send their partial results before they are killed.
WORKER_STOP_GRACE_S = 3.0
JOIN_TIMEOUT_S = 5.0


@dataclass(frozen=True)
class StageSpec:
    label: str
    concurrency: int | None
    rate: float | None
    num_requests: int
    duration_s: float
    first_request: int = 0  # run-wide number of the stage's first request (prompts.request_number)
    burstiness: float = 1.0


@dataclass
class StageRun:
    spec: StageSpec
    workers: list[WorkerResult] = field(default_factory=list)
    lost_workers: int = 0
    interrupted: str | None = None  # "SIGINT" | "SIGTERM": the stage was cut short

    def __post_init__(self) -> None:
        if self.interrupted is None:
            self.interrupted = next((w.interrupted for w in self.workers if w.interrupted), None)


def split_evenly(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def _firsts(spec: StageSpec, counts: list[int]) -> Iterator[int]:
    """Each worker's first request number: consecutive, disjoint ranges within the stage's."""
    first = spec.first_request
    for count in counts:
        yield first
        first += count


def shares_for(spec: StageSpec, workers: int, seed: int) -> list[StageShare]:
    counts = split_evenly(spec.num_requests, workers)
    if spec.concurrency is not None:
        # Fewer slots than workers: the idle workers get no requests, the busy ones all of them.
        active = min(workers, spec.concurrency)
        slots = split_evenly(spec.concurrency, active) + [0] * (workers - active)
        counts = split_evenly(spec.num_requests, active) + [0] * (workers - active)
        return [
            StageShare(slots[i], None, counts[i], spec.duration_s, seed + i, first)
            for i, first in enumerate(_firsts(spec, counts))
        ]
    assert spec.rate is not None
    # The sum of independent Poisson processes is a Poisson process with the summed rate (with
    # --burstiness the sum of gamma renewal processes keeps the rate, not the exact shape).
    return [
        StageShare(None, spec.rate / workers, counts[i], spec.duration_s, seed + i, first, spec.burstiness)
        for i, first in enumerate(_firsts(spec, counts))
    ]


def _run_loop(coro: Coroutine[Any, Any, WorkerResult]) -> WorkerResult:
    try:
        import uvloop  # noqa: PLC0415 - optional speed-up; the client works on plain asyncio

        factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency on Linux
        factory = asyncio.new_event_loop
    with _handlers_restored(), asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


@contextlib.contextmanager
def _handlers_restored() -> Iterator[None]:
    """The loop's signal handlers reset SIGINT/SIGTERM to the defaults when removed; put back
    whatever was there before (the session's `raise_on_signals` handler)."""
    main = _is_main_thread()
    previous = {sig: signal.getsignal(sig) for sig in HANDLED_SIGNALS} if main else {}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            if handler is not None:
                signal.signal(sig, handler)


def _is_main_thread() -> bool:
    import threading  # noqa: PLC0415 - only needed here

    return threading.current_thread() is threading.main_thread()


async def _with_progress(
    target: Target, share: StageShare, on_progress: Callable[[int], None] | None
) -> WorkerResult:
    done = [0]

    def bump() -> None:
        done[0] += 1

    async def report() -> None:
        while True:
            await asyncio.sleep(PROGRESS_INTERVAL_S)
            if on_progress is not None:
                on_progress(done[0])

    reporter = asyncio.create_task(report())
    try:
        return await run_share(target, share, bump, signals=HANDLED_SIGNALS)
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
        if on_progress is not None:
            on_progress(done[0])


def _worker_main(target: Target, share: StageShare, index: int, link: tuple[Any, Any, int]) -> None:
    """One worker process; `link` = (shared progress counters, result queue, parent pid)."""
    counters, results, parent = link
    # Ctrl-C reaches the whole process group: the parent handles it and sends SIGTERM, which
    # stops this worker gracefully (partial results are still sent).
    signal.signal(signal.SIGINT, signal.SIG_IGN)

    def bump() -> None:
        counters[index] += 1

    results.put((index, _run_loop(run_share(target, share, bump, (signal.SIGTERM,), parent))))


def run_stage(
    target: Target,
    spec: StageSpec,
    workers: int,
    seed: int,
    on_progress: Callable[[int], None] | None = None,
) -> StageRun:
    shares = shares_for(spec, workers, seed)
    if workers == 1:
        return StageRun(spec, [_run_loop(_with_progress(target, shares[0], on_progress))])
    ctx = multiprocessing.get_context("spawn")
    counters = ctx.Array("q", workers, lock=False)
    results = ctx.Queue()
    procs = [
        ctx.Process(
            target=_worker_main, args=(target, shares[i], i, (counters, results, os.getpid())), daemon=True
        )
        for i in range(workers)
    ]
    collected: dict[int, WorkerResult] = {}
    interrupted: str | None = None
    try:
        _start_ignoring_sigint(procs)
        hard_deadline = time.monotonic() + spec.duration_s + target.request_timeout_s + WORKER_GRACE_S
        while len(collected) < workers and time.monotonic() < hard_deadline:
            _collect(results, collected, PROGRESS_INTERVAL_S)
            if len(collected) < workers and all(not p.is_alive() for p in procs) and results.empty():
                break
            if on_progress is not None:
                on_progress(sum(counters))
    except Interrupted as signal_:
        interrupted = signal_.name
        for proc in procs:  # each stops gracefully and sends what it measured
            if proc.is_alive() and proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)
        grace_end = time.monotonic() + WORKER_STOP_GRACE_S
        while len(collected) < sum(1 for p in procs if p.pid) and time.monotonic() < grace_end:
            _collect(results, collected, 0.05)
            if all(not p.is_alive() for p in procs) and results.empty():
                break
    finally:
        _end_workers(procs)
        results.close()
        results.join_thread()
    return StageRun(
        spec,
        [collected[i] for i in sorted(collected)],
        lost_workers=0 if interrupted else workers - len(collected),
        interrupted=interrupted,
    )


def _start_ignoring_sigint(procs: list[multiprocessing.process.BaseProcess]) -> None:
    """Start the workers with SIGINT ignored from their first instruction (inherited through exec),
    so a Ctrl-C during their start-up never prints a traceback from a child."""
    main = _is_main_thread()
    previous = signal.getsignal(signal.SIGINT) if main else None
    if main:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        for proc in procs:
            proc.start()
    finally:
        if main and previous is not None:
            signal.signal(signal.SIGINT, previous)


def _collect(results: Any, collected: dict[int, WorkerResult], timeout: float) -> None:
    try:
        index, result = results.get(timeout=timeout)
    except queue.Empty:
        return
    collected[index] = result


def _end_workers(procs: list[multiprocessing.process.BaseProcess]) -> None:
    """Terminate, then kill, and join every worker: none outlives the stage."""
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
    deadline = time.monotonic() + JOIN_TIMEOUT_S
    for proc in procs:
        if proc.pid is None:
            continue
        proc.join(max(0.0, deadline - time.monotonic()))
        if proc.is_alive():
            proc.kill()
            proc.join(JOIN_TIMEOUT_S)
