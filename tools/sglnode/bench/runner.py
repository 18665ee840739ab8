"""Runs load stages across one or more worker processes and merges what they measured.

One process per `--workers`: a Python event loop is single-threaded, so the client ceiling
scales with processes, not with tasks. perf_counter is CLOCK_MONOTONIC on Linux, shared by all
processes of the machine, so records from different workers share one time axis.
"""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import queue
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any

from sglnode.bench.loadgen import StageShare, Target, WorkerResult, run_share

# How often the progress bar refreshes.
PROGRESS_INTERVAL_S = 0.25
# Slack beyond duration + request timeout before a silent worker process is killed.
WORKER_GRACE_S = 15.0


@dataclass(frozen=True)
class StageSpec:
    label: str
    concurrency: int | None
    rate: float | None
    num_requests: int
    duration_s: float


@dataclass
class StageRun:
    spec: StageSpec
    workers: list[WorkerResult] = field(default_factory=list)
    lost_workers: int = 0


def split_evenly(total: int, parts: int) -> list[int]:
    base, extra = divmod(total, parts)
    return [base + (1 if i < extra else 0) for i in range(parts)]


def shares_for(spec: StageSpec, workers: int, seed: int) -> list[StageShare]:
    counts = split_evenly(spec.num_requests, workers)
    if spec.concurrency is not None:
        # Fewer slots than workers: the idle workers get no requests, the busy ones all of them.
        active = min(workers, spec.concurrency)
        slots = split_evenly(spec.concurrency, active) + [0] * (workers - active)
        counts = split_evenly(spec.num_requests, active) + [0] * (workers - active)
        return [StageShare(slots[i], None, counts[i], spec.duration_s, seed + i) for i in range(workers)]
    assert spec.rate is not None
    # The sum of independent Poisson processes is a Poisson process with the summed rate.
    return [
        StageShare(None, spec.rate / workers, counts[i], spec.duration_s, seed + i) for i in range(workers)
    ]


def _run_loop(coro: Coroutine[Any, Any, WorkerResult]) -> WorkerResult:
    try:
        import uvloop  # noqa: PLC0415 - optional speed-up; the client works on plain asyncio

        factory = uvloop.new_event_loop
    except ImportError:  # pragma: no cover - uvloop is a pinned dependency on Linux
        factory = asyncio.new_event_loop
    with asyncio.Runner(loop_factory=factory) as runner:
        return runner.run(coro)


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
        return await run_share(target, share, bump)
    finally:
        reporter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reporter
        if on_progress is not None:
            on_progress(done[0])


def _worker_main(target: Target, share: StageShare, index: int, counters: Any, results: Any) -> None:
    def bump() -> None:
        counters[index] += 1

    results.put((index, _run_loop(run_share(target, share, bump))))


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
        ctx.Process(target=_worker_main, args=(target, shares[i], i, counters, results), daemon=True)
        for i in range(workers)
    ]
    for proc in procs:
        proc.start()
    hard_deadline = time.monotonic() + spec.duration_s + target.request_timeout_s + WORKER_GRACE_S
    collected: dict[int, WorkerResult] = {}
    while len(collected) < workers and time.monotonic() < hard_deadline:
        try:
            index, result = results.get(timeout=PROGRESS_INTERVAL_S)
            collected[index] = result
        except queue.Empty:
            if all(not p.is_alive() for p in procs) and results.empty():
                break
        if on_progress is not None:
            on_progress(sum(counters))
    for proc in procs:
        if proc.is_alive():
            proc.terminate()
        proc.join(timeout=5)
    run = StageRun(spec, [collected[i] for i in sorted(collected)], lost_workers=workers - len(collected))
    return run
