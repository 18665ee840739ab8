"""One worker process's share of one load stage: closed-loop concurrency or open-loop arrivals
(Poisson, or gamma with --burstiness).

The worker also measures itself (docs/bench.md, "Client saturation"): CPU time over wall time
and event-loop lag, because a saturated client reports late arrivals as server latency.

Every request is encoded when it is sent, from its run-wide number (encode.RequestEncoder), so
memory does not grow with --num-requests and no two requests share a prompt.

SIGINT/SIGTERM (`interruptible=True`): the stage stops at once, the requests in flight are dropped
(they count neither as ok nor as errors), and what finished is returned with `interrupted` set.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from sglnode.bench.apis import ApiName
from sglnode.bench.encode import RequestEncoder
from sglnode.bench.httpstream import StreamClient
from sglnode.bench.records import GapSink, RequestRecord

# How often the lag probe wakes: short enough to catch a busy loop, long enough to cost nothing.
LAG_PROBE_INTERVAL_S = 0.01
# How often the watchdog looks for stalled or overdue requests.
WATCHDOG_INTERVAL_S = 0.1
# After this many connect failures in a row the server is gone: stop instead of spinning.
MAX_CONSECUTIVE_CONNECT_FAILURES = 20
# Open-loop (request-rate) mode: connections allowed at once before new arrivals wait (fd safety).
MAX_OPEN_LOOP_IN_FLIGHT = 4096
# A worker process whose parent is gone (killed with SIGKILL) stops within this long.
PARENT_WATCH_INTERVAL_S = 0.5


@dataclass(frozen=True)
class Target:
    host: str
    port: int
    api: ApiName
    encoder: RequestEncoder  # request number -> HTTP request bytes
    requested_tokens: int
    connect_timeout_s: float
    request_timeout_s: float
    stall_timeout_s: float


@dataclass(frozen=True)
class StageShare:
    """What one worker runs: its concurrency (or rate), its request budget, the shared deadline."""

    concurrency: int | None
    rate: float | None
    num_requests: int
    duration_s: float
    seed: int
    first_request: int = 0  # run-wide number of this share's first request (prompts.request_number)
    burstiness: float = 1.0  # open loop: gamma shape of the inter-arrival times (1 = Poisson)


@dataclass
class WorkerResult:
    records: list[RequestRecord] = field(default_factory=list)
    itl: GapSink = field(default_factory=GapSink)
    chunk_gaps: GapSink = field(default_factory=GapSink)
    cpu_s: float = 0.0
    wall_s: float = 0.0
    loop_lag_s: list[float] = field(default_factory=list)
    aborted: str | None = None
    interrupted: str | None = None  # "SIGINT" | "SIGTERM" | "parent exited"


class _Stage:
    def __init__(self, target: Target, share: StageShare, on_done: Callable[[], None]) -> None:
        self.target = target
        self.share = share
        self.on_done = on_done
        self.result = WorkerResult()
        self.issued = 0
        self.deadline = 0.0
        self.connect_failures = 0
        self.clients: list[StreamClient] = []
        self.stop = False
        self.main: asyncio.Task[None] | None = None

    def _next_request(self) -> bytes | None:
        if self.stop or self.issued >= self.share.num_requests or time.perf_counter() >= self.deadline:
            return None
        request = self.target.encoder.request(self.share.first_request + self.issued)
        self.issued += 1
        return request

    def interrupt(self, reason: str) -> None:
        """Stop now: no new request, the ones in flight are dropped, what finished is kept."""
        if self.result.interrupted is None:
            self.result.interrupted = reason
        self.stop = True
        if self.main is not None:
            self.main.cancel()

    def _new_client(self) -> StreamClient:
        client = StreamClient(
            self.target.host, self.target.port, self.target.api, self.target.connect_timeout_s
        )
        self.clients.append(client)
        return client

    async def _send(self, client: StreamClient, request: bytes) -> None:
        record, connect_failed = await client.request(
            request, self.target.requested_tokens, self.result.itl, self.result.chunk_gaps
        )
        self.result.records.append(record)
        self.on_done()
        if connect_failed:
            self.connect_failures += 1
            if self.connect_failures >= MAX_CONSECUTIVE_CONNECT_FAILURES and not self.stop:
                self.stop = True
                self.result.aborted = f"server unreachable: {record.error}"
        else:
            self.connect_failures = 0

    async def _closed_loop_slot(self) -> None:
        client = self._new_client()
        while (request := self._next_request()) is not None:
            await self._send(client, request)

    async def _open_loop(self) -> None:
        rng = random.Random(self.share.seed)
        rate = self.share.rate or 1.0
        shape = self.share.burstiness
        idle: list[StreamClient] = []
        tasks: set[asyncio.Task[None]] = set()
        next_at = time.perf_counter()

        async def one(request: bytes) -> None:
            client = idle.pop() if idle else self._new_client()
            try:
                await self._send(client, request)
            finally:
                idle.append(client)

        while (request := self._next_request()) is not None:
            # Gamma inter-arrival times of mean 1/rate: shape 1 is Poisson (exponential gaps, as
            # sglang.benchmark.serving draws them); < 1 burstier, > 1 more regular.
            next_at += (
                rng.expovariate(rate) if shape == 1.0 else rng.gammavariate(shape, 1.0 / (rate * shape))
            )
            delay = next_at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            while len(tasks) >= MAX_OPEN_LOOP_IN_FLIGHT:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            task = asyncio.create_task(one(request))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
        if tasks:
            await asyncio.gather(*tasks)

    async def _watchdog(self) -> None:
        stall = self.target.stall_timeout_s
        overall = self.target.request_timeout_s
        while True:
            await asyncio.sleep(WATCHDOG_INTERVAL_S)
            now = time.perf_counter()
            for client in self.clients:
                proto = client.proto
                if not client.in_flight or proto is None or proto.waiter is None or proto.waiter.done():
                    continue
                if now - proto.start > overall:
                    proto.abort(f"request_timeout: no end after {overall:g}s")
                elif now - proto.last_read > stall:
                    proto.abort(f"stalled: no bytes for {stall:g}s")

    async def _lag_probe(self) -> None:
        lags = self.result.loop_lag_s
        while True:
            before = time.perf_counter()
            await asyncio.sleep(LAG_PROBE_INTERVAL_S)
            lags.append(max(time.perf_counter() - before - LAG_PROBE_INTERVAL_S, 0.0))

    async def _drive(self) -> None:
        if self.share.rate is not None:
            await self._open_loop()
        else:
            slots = max(self.share.concurrency or 1, 1)
            await asyncio.gather(*(self._closed_loop_slot() for _ in range(slots)))

    async def _watch_parent(self, parent: int) -> None:
        while True:
            await asyncio.sleep(PARENT_WATCH_INTERVAL_S)
            if os.getppid() != parent:
                self.interrupt("parent exited")
                return

    def _install_signals(self, signals: tuple[signal.Signals, ...]) -> list[signal.Signals]:
        loop = asyncio.get_running_loop()
        installed = []
        for sig in signals:
            try:
                loop.add_signal_handler(sig, self.interrupt, sig.name)
            except (ValueError, RuntimeError, NotImplementedError):  # not the main thread
                continue
            installed.append(sig)
        return installed

    async def run(self, signals: tuple[signal.Signals, ...] = (), parent: int | None = None) -> WorkerResult:
        cpu0, wall0 = time.process_time(), time.perf_counter()
        self.deadline = wall0 + self.share.duration_s
        helpers = [asyncio.create_task(self._watchdog()), asyncio.create_task(self._lag_probe())]
        if parent is not None:
            helpers.append(asyncio.create_task(self._watch_parent(parent)))
        installed = self._install_signals(signals)
        self.main = asyncio.create_task(self._drive())
        try:
            with contextlib.suppress(asyncio.CancelledError):
                await self.main
        finally:
            loop = asyncio.get_running_loop()
            for sig in installed:
                loop.remove_signal_handler(sig)
            for task in helpers:
                task.cancel()
            for task in helpers:
                with contextlib.suppress(asyncio.CancelledError):
                    await task
            for client in self.clients:
                client.close()
        self.result.cpu_s = time.process_time() - cpu0
        self.result.wall_s = time.perf_counter() - wall0
        return self.result


async def run_share(
    target: Target,
    share: StageShare,
    on_done: Callable[[], None] = lambda: None,
    signals: tuple[signal.Signals, ...] = (),
    parent: int | None = None,
) -> WorkerResult:
    """Run one share. `signals` stop it gracefully (see the module doc); `parent`: stop when that
    process is no longer our parent (a worker whose bench was killed must not run on)."""
    if share.num_requests <= 0 or (share.concurrency is not None and share.concurrency <= 0):
        return WorkerResult()
    return await _Stage(target, share, on_done).run(signals, parent)
