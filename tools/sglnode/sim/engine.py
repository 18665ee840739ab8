"""The simulated scheduler: queues requests, paces tokens by the planner's roofline, keeps stats.

Tokens carry no meaning; their timing does. Each running request waits one decode step per
token, and the step time is the roofline's at the current number of running requests, so a
benchmark sees throughput grow and per-request speed fall with concurrency as on the real node.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections import deque
from collections.abc import AsyncGenerator, Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from sglnode.planning.planner import PlanResult, roofline_point
from sglnode.readiness import loglines
from sglnode.sim.config import SimConfig
from sglnode.sim.log import SimLog
from sglnode.sim.prefix_cache import PrefixCache, prompt_tokens

# Prompt tokens one decode step's worth of weight streaming can prefill (prefill is compute-bound
# past this many tokens); an estimate to give prefill a length-dependent cost.
PREFILL_TOKENS_PER_STEP = 256
# No tokenizer runs: a prompt costs one token per this many characters (English BPE average).
CHARS_PER_TOKEN = 4
DEFAULT_MAX_NEW_TOKENS = 128  # SGLang's SamplingParams default
GEN_THROUGHPUT_WINDOW_S = 5.0
DECODE_LOG_INTERVAL_S = 2.0
# metrics_reporter.py _graph_backend_label on CUDA
GRAPH_LABEL = "cuda graph"
KV_POLL_INTERVAL_S = 0.01
KV_WAIT_TIMEOUT_S = 30.0
MAX_TRACKED_ROOMS = 100_000
RESPONSE_FLUSH_S = 0.1
WORDS = ("sim", "token", "lorem", "ipsum", "dolor", "amet", "node", "blackwell", "decode", "step")
# Prometheus histogram buckets (seconds), as SGLang's TokenizerMetricsCollector uses.
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 120.0, 160.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080, 0.1)
E2E_BUCKETS = (0.1, 0.25, 0.5, 1, 2, 5, 10, 20, 40, 60, 80, 100, 150, 200, 250, 300, 350, 500, 1000)

ROOM_PENDING = "pending"
ROOM_READY = "ready"
ROOM_FAILED = "failed"


class KVTransferError(RuntimeError):
    """The decode side could not get the KV cache from the prefill side."""


@dataclass
class Histogram:
    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        self.counts = [0] * len(self.buckets)

    def observe(self, value: float) -> None:
        self.total += value
        self.count += 1
        for index, bound in enumerate(self.buckets):
            if value <= bound:
                self.counts[index] += 1


@dataclass
class GenRequest:
    prompt_tokens: int
    max_new_tokens: int
    rid: str = field(default_factory=lambda: uuid.uuid4().hex)
    cached_tokens: int = 0  # prompt tokens the radix cache already held (their prefill is skipped)
    bootstrap_host: str | None = None
    bootstrap_port: int | None = None
    bootstrap_room: int | None = None


@dataclass(frozen=True)
class TokenEvent:
    index: int
    text: str
    finished: bool
    prompt_tokens: int
    completion_tokens: int
    elapsed_s: float
    cached_tokens: int = 0


def count_prompt_tokens(prompt: Any) -> int:
    """Token count of a prompt: ids are counted, text is estimated from its length."""
    if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
        return len(prompt)
    if isinstance(prompt, list):
        return sum(count_prompt_tokens(part) for part in prompt) or 1
    return max(1, len(str(prompt or "")) // CHARS_PER_TOKEN)


class SimEngine:
    def __init__(
        self,
        config: SimConfig,
        plan: PlanResult,
        log: SimLog,
        max_running_requests: int,
        on_crash: Callable[[str], None] | None = None,
    ) -> None:
        self.config = config
        self.plan = plan
        self.log = log
        self.max_running_requests = max_running_requests
        self.on_crash = on_crash
        self.ready = False
        self.running = 0
        self.queued = 0
        self.used_tokens = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.requests_total = 0
        self.completed_requests = 0
        self.ttft = Histogram(TTFT_BUCKETS)
        self.itl = Histogram(ITL_BUCKETS)
        self.e2e = Histogram(E2E_BUCKETS)
        self.rooms: dict[int, str] = {}
        self.prefix_cache = PrefixCache(plan.kv_tokens)
        self._recent: deque[tuple[float, int]] = deque()
        self._step_cache: dict[int, float] = {}
        self._slots: asyncio.Semaphore | None = None
        self._session: aiohttp.ClientSession | None = None
        self._last_decode_log = 0.0

    # --- timing ---------------------------------------------------------------------------------
    def step_seconds(self, running: int) -> float:
        """Wall seconds of one decode step with `running` requests (roofline x time scale)."""
        running = max(running, 1)
        if running not in self._step_cache:
            capacity = self.plan.kv_tokens // max(self.plan.roofline_context_tokens, 1)
            point = roofline_point(
                self.plan.model,
                self.plan.gpu,
                self.plan.server,
                concurrency=running,
                context_tokens=self.plan.roofline_context_tokens,
                capacity_per_replica=capacity,
                kv_bytes_per_token=self.plan.kv_cell_bytes,
            )
            self._step_cache[running] = 1.0 / point.per_request_tok_s
        return self._step_cache[running] * self.config.time_scale * self.config.faults.slow_stream_factor

    def prefill_seconds(self, prompt_tokens: int) -> float:
        steps = max(1.0, prompt_tokens / PREFILL_TOKENS_PER_STEP)
        return steps * self.step_seconds(1) / self.config.faults.slow_stream_factor

    def gen_throughput(self) -> float:
        now = time.monotonic()
        while self._recent and now - self._recent[0][0] > GEN_THROUGHPUT_WINDOW_S:
            self._recent.popleft()
        return sum(n for _, n in self._recent) / GEN_THROUGHPUT_WINDOW_S

    def token_usage(self) -> float:
        return self.used_tokens / self.plan.kv_tokens if self.plan.kv_tokens else 0.0

    # --- radix cache ------------------------------------------------------------------------------
    def cached_prefix(self, prompt: Any) -> int:
        """Prompt tokens a previous prompt shared (0 with --disable-radix-cache), and remember this one."""
        if self.config.radix_cache_disabled:
            return 0
        return self.prefix_cache.match_and_insert(prompt_tokens(prompt))

    def flush_cache(self) -> bool:
        """SGLang's scheduler flushes only when idle (managers/scheduler.py flush_cache)."""
        if self.running or self.queued:
            self.log.info(
                "Cache not flushed because there are pending requests. "
                f"#queue-req: {self.queued}, #running-req: {self.running}"
            )
            return False
        self.prefix_cache.flush()
        self.log.info("Cache flushed successfully!")
        return True

    # --- PD ---------------------------------------------------------------------------------------
    def set_room(self, room: int, state: str) -> None:
        if len(self.rooms) >= MAX_TRACKED_ROOMS:
            self.rooms.pop(next(iter(self.rooms)))
        self.rooms[room] = state

    async def _session_get(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5))
        return self._session

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def wait_for_kv(self, request: GenRequest) -> None:
        """Decode side: wait until the prefill side says this bootstrap room's KV is ready."""
        if self.config.faults.kv_transfer_fail:
            raise KVTransferError("Failed to get kvcache from prefill instance, it might be dead")
        url = f"http://{request.bootstrap_host}:{request.bootstrap_port}/sglnode_sim/kv/{request.bootstrap_room}"
        session = await self._session_get()
        deadline = time.monotonic() + KV_WAIT_TIMEOUT_S
        while time.monotonic() < deadline:
            try:
                async with session.get(url) as response:
                    state = (await response.json()).get("state") if response.status == 200 else None
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                raise KVTransferError(
                    f"Failed to get kvcache from prefill instance, it might be dead: {exc}"
                ) from exc
            if state == ROOM_READY:
                return
            if state == ROOM_FAILED:
                raise KVTransferError("Prefill instance failed to send the kvcache")
            await asyncio.sleep(KV_POLL_INTERVAL_S)
        raise KVTransferError(f"Timed out waiting for kvcache after {KV_WAIT_TIMEOUT_S:.0f} s")

    # --- generation -------------------------------------------------------------------------------
    def _slots_get(self) -> asyncio.Semaphore:
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.max_running_requests)
        return self._slots

    async def generate(self, request: GenRequest) -> AsyncGenerator[TokenEvent, None]:
        """Yield tokens for one request; raises KVTransferError when PD transfer fails."""
        mode = self.config.disaggregation_mode
        start = time.monotonic()
        self.requests_total += 1
        self.prompt_tokens_total += request.prompt_tokens
        if mode == "decode" and request.bootstrap_room is not None and request.bootstrap_host:
            try:
                await self.wait_for_kv(request)
            except KVTransferError as exc:
                self.log.info(
                    f"Decode transfer failed for request rank=0 req.rid='{request.rid}' "
                    f"req.bootstrap_room={request.bootstrap_room} with exception "
                    f"KVTransferError(bootstrap_room={request.bootstrap_room}): {exc}"
                )
                raise
        self.queued += 1
        slots = self._slots_get()
        await slots.acquire()
        self.queued -= 1
        self.running += 1
        held_tokens = request.prompt_tokens
        self.used_tokens += held_tokens
        try:
            if mode != "decode":
                self._log_prefill(request)
                await asyncio.sleep(self.prefill_seconds(request.prompt_tokens - request.cached_tokens))
            if mode == "prefill":
                failed = self.config.faults.kv_transfer_fail
                if request.bootstrap_room is not None:
                    self.set_room(request.bootstrap_room, ROOM_FAILED if failed else ROOM_READY)
            # Prefill servers produce the first token only; decode continues from it.
            count = 1 if mode == "prefill" else request.max_new_tokens
            async for event in self._tokens(request, start, count):
                held_tokens += 1
                self.used_tokens += 1
                yield event
            self._finish_request(start)
        finally:
            self.used_tokens -= held_tokens
            self.running -= 1
            slots.release()

    async def _tokens(
        self, request: GenRequest, start: float, count: int
    ) -> AsyncGenerator[TokenEvent, None]:
        seed = sum(map(ord, request.rid))
        last = time.monotonic()
        for index in range(count):
            if index:
                await asyncio.sleep(self.step_seconds(self.running))
            now = time.monotonic()
            if index == 0:
                self.ttft.observe(now - start)
            else:
                self.itl.observe(now - last)
            last = now
            self.generation_tokens_total += 1
            self._recent.append((now, 1))
            self._maybe_log_decode()
            yield TokenEvent(
                index=index,
                text=" " + WORDS[(seed + index) % len(WORDS)],
                finished=index == count - 1,
                prompt_tokens=request.prompt_tokens,
                completion_tokens=index + 1,
                elapsed_s=now - start,
                cached_tokens=request.cached_tokens,
            )

    def _finish_request(self, start: float) -> None:
        self.e2e.observe(time.monotonic() - start)
        self.completed_requests += 1
        limit = self.config.faults.crash_after_requests
        if limit is not None and self.completed_requests == limit and self.on_crash:
            # Let the Nth response reach its client first: the crash comes right after it.
            reason = f"crash_after_requests:{limit}"
            asyncio.get_running_loop().call_later(RESPONSE_FLUSH_S, self.on_crash, reason)

    def _token_usage(self) -> str:
        return (
            loglines.TOKEN_USAGE.render(full_num_used=self.used_tokens, full_token_usage=self.token_usage())
            + ", "
        )

    def _log_prefill(self, request: GenRequest) -> None:
        # The pinned SGLang's metrics_reporter.py: the head from its template, then the graph/throughput tail.
        self.log.info(
            loglines.PREFILL_BATCH.render(
                iter_msg="",
                num_new_seqs=1,
                log_input_tokens=request.prompt_tokens - request.cached_tokens,
                log_hit_tokens=request.cached_tokens,
                token_usage_msg=self._token_usage(),
                total=self.running - 1,
                len=self.queued,
                num_pending_tokens=0,
            )
            + f"{GRAPH_LABEL}: False, input throughput (token/s): 0.00"
        )

    def _maybe_log_decode(self) -> None:
        now = time.monotonic()
        if now - self._last_decode_log < DECODE_LOG_INTERVAL_S:
            return
        self._last_decode_log = now
        self.log.info(
            loglines.DECODE_BATCH.render(
                iter_msg="", num_running_reqs=self.running, token_usage_msg=self._token_usage()
            )
            + loglines.DECODE_BATCH_TAIL.render(
                _graph_backend_label=GRAPH_LABEL,
                can_run_cuda_graph=self.running <= self.plan.sglang.decode_max_bs,
                last_gen_throughput=self.gen_throughput(),
                len=self.queued,
            )
        )
