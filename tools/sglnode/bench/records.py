"""One request's outcome, derived from what arrived and when (docs/bench.md defines each field).

The streaming client records one arrival per socket read that completed SSE events: its time,
the tokens it carried and the content chunks it carried. Everything below is derived from that
list, so the rules for TTFT, per-token ITL and chunk gaps live in one pure function.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass
class GapSink:
    """Gaps between arrivals, with the zero gaps counted rather than stored.

    A chunk with k tokens yields k tokens at its arrival: one gap since the previous token and
    k-1 zero gaps (docs/bench.md, "ITL"). Zero gaps are the majority under speculative decoding
    or a saturated reader, so they are a counter, not a list.
    """

    nonzero: list[float] = field(default_factory=list)
    zeros: int = 0

    def extend(self, other: GapSink) -> None:
        self.nonzero.extend(other.nonzero)
        self.zeros += other.zeros

    @property
    def count(self) -> int:
        return len(self.nonzero) + self.zeros


@dataclass
class RequestRecord:
    ok: bool
    error: str | None
    start_s: float  # perf_counter time the request was sent
    ttft_s: float | None
    e2e_s: float | None
    output_tokens: int  # server-reported when present, else counted from arrivals
    token_source: str  # "server" | "arrived" | "none"
    arrived_tokens: int  # tokens attributed to chunks as they arrived
    content_chunks: int
    prompt_tokens: int | None
    requested_tokens: int
    per_chunk_counts: bool  # the server reported cumulative counts in every chunk
    cached_tokens: int | None = None  # prompt tokens the server took from its prefix cache, if it said

    @property
    def tpot_s(self) -> float | None:
        """TPOT = (E2E - TTFT) / (n - 1); undefined for fewer than two tokens."""
        if self.e2e_s is None or self.ttft_s is None or self.output_tokens < 2:
            return None
        return (self.e2e_s - self.ttft_s) / (self.output_tokens - 1)

    def to_json(self) -> dict[str, object]:
        data = asdict(self)
        data["tpot_s"] = self.tpot_s
        return data


def derive_gaps(
    times: list[float], tokens: list[int], chunks: list[int], itl: GapSink, chunk_gaps: GapSink
) -> None:
    """Per-token ITL and chunk gaps from one request's arrivals (appended to the sinks)."""
    last_token_t: float | None = None
    last_chunk_t: float | None = None
    for t, k, c in zip(times, tokens, chunks, strict=True):
        if k > 0:
            if last_token_t is not None:
                itl.nonzero.append(t - last_token_t)
                itl.zeros += k - 1
            else:
                itl.zeros += k - 1  # the first token is TTFT; the rest of its chunk came with it
            last_token_t = t
        if c > 0:
            if last_chunk_t is not None:
                chunk_gaps.nonzero.append(t - last_chunk_t)
                chunk_gaps.zeros += c - 1
            else:
                chunk_gaps.zeros += c - 1
            last_chunk_t = t


def build_record(
    *,
    start: float,
    end: float | None,
    times: list[float],
    tokens: list[int],
    chunks: list[int],
    reported_tokens: int | None,
    prompt_tokens: int | None,
    requested_tokens: int,
    per_chunk_counts: bool,
    error: str | None,
    cached_tokens: int | None = None,
) -> RequestRecord:
    arrived = sum(tokens)
    first = next((t for t, k in zip(times, tokens, strict=True) if k > 0), None)
    if reported_tokens is not None:
        output_tokens, source = reported_tokens, "server"
    elif arrived:
        output_tokens, source = arrived, "arrived"
    else:
        output_tokens, source = 0, "none"
    ok = error is None and first is not None
    if error is None and first is None:
        error = "no_tokens"
    return RequestRecord(
        ok=ok,
        error=error,
        start_s=start,
        ttft_s=None if first is None else first - start,
        e2e_s=None if end is None or not ok else end - start,
        output_tokens=output_tokens,
        token_source=source,
        arrived_tokens=arrived,
        content_chunks=sum(chunks),
        prompt_tokens=prompt_tokens,
        requested_tokens=requested_tokens,
        per_chunk_counts=per_chunk_counts,
        cached_tokens=cached_tokens,
    )
