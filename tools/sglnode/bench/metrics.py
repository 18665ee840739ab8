"""Stage summaries: the figures docs/bench.md defines, computed from merged worker results."""

from __future__ import annotations

import itertools
import math
from collections import Counter
from dataclasses import dataclass

from sglnode.bench.records import GapSink, RequestRecord
from sglnode.bench.runner import StageRun

PERCENTILES = (50.0, 90.0, 99.0)
# Client saturation (docs/bench.md): a worker busier than this fraction of one core, or whose
# event loop wakes this late in 10 % of its probes, cannot timestamp arrivals faithfully. p90,
# not p99: one scheduler hiccup or GC pause in a short stage must not flag the whole client.
CLIENT_CPU_SATURATION_FRACTION = 0.85
CLIENT_LOOP_LAG_P90_LIMIT_S = 0.005
MS = 1000.0


@dataclass(frozen=True)
class Slo:
    ttft_ms: float | None = None
    tpot_ms: float | None = None

    @property
    def active(self) -> bool:
        return self.ttft_ms is not None or self.tpot_ms is not None


def percentile_sorted(values: list[float], pct: float, zeros: int = 0) -> float:
    """Linear-interpolated percentile of `zeros` zero values followed by sorted `values`."""
    total = zeros + len(values)
    if total == 0:
        return math.nan
    rank = pct / 100.0 * (total - 1)
    low = math.floor(rank)
    high = min(low + 1, total - 1)

    def at(i: int) -> float:
        return 0.0 if i < zeros else values[i - zeros]

    return at(low) + (at(high) - at(low)) * (rank - low)


def distribution_ms(values: list[float], zeros: int = 0) -> dict[str, float | int | None]:
    """count, mean, p50/p90/p99, max in milliseconds; None for an empty distribution."""
    ordered = sorted(values)
    count = len(ordered) + zeros
    if count == 0:
        return {"count": 0, "mean": None, "p50": None, "p90": None, "p99": None, "max": None}
    out: dict[str, float | int | None] = {"count": count, "mean": sum(ordered) / count * MS}
    for pct in PERCENTILES:
        out[f"p{pct:g}"] = percentile_sorted(ordered, pct, zeros) * MS
    out["max"] = (ordered[-1] if ordered else 0.0) * MS
    return out


def gap_distribution_ms(sink: GapSink) -> dict[str, float | int | None]:
    return distribution_ms(sink.nonzero, sink.zeros)


def interpolate_roofline(points: list[tuple[float, float]], concurrency: float) -> tuple[float, bool] | None:
    """Roofline decode tok/s at `concurrency` by linear interpolation; (value, extrapolated)."""
    if not points:
        return None
    pts = sorted(points)
    if concurrency <= pts[0][0]:
        return pts[0][1], concurrency < pts[0][0]
    if concurrency >= pts[-1][0]:
        return pts[-1][1], concurrency > pts[-1][0]
    for (c0, v0), (c1, v1) in itertools.pairwise(pts):
        if c0 <= concurrency <= c1:
            return v0 + (v1 - v0) * (concurrency - c0) / (c1 - c0), False
    return None  # pragma: no cover - the loop covers every interior point


def error_kind(error: str) -> str:
    return error.split(":", 1)[0]


def summarize(run: StageRun, slo: Slo, roofline: list[tuple[float, float]] | None) -> dict[str, object]:
    records: list[RequestRecord] = [r for w in run.workers for r in w.records]
    ok = [r for r in records if r.ok]
    itl = GapSink()
    chunk_gaps = GapSink()
    for worker in run.workers:
        itl.extend(worker.itl)
        chunk_gaps.extend(worker.chunk_gaps)

    # Wall time of the stage: first request sent to last request finished (docs: "Throughput").
    ends = [r.start_s + r.e2e_s for r in ok if r.e2e_s is not None]
    starts = [r.start_s for r in records]
    wall = (max(ends) - min(starts)) if ends and starts else 0.0
    out_tokens = sum(r.output_tokens for r in ok)
    errors = Counter(error_kind(r.error) for r in records if r.error)
    total = len(records)

    summary: dict[str, object] = {
        "label": run.spec.label,
        "concurrency": run.spec.concurrency,
        "request_rate": run.spec.rate,
        "requests": {
            "sent": total,
            "ok": len(ok),
            "errors": total - len(ok),
            "error_rate": (total - len(ok)) / total if total else 0.0,
            "errors_by_reason": dict(errors),
            "first_errors": [r.error for r in records if r.error][:5],
        },
        "wall_s": wall,
        "output_tokens": out_tokens,
        "output_tok_s": out_tokens / wall if wall > 0 else 0.0,
        "request_s": len(ok) / wall if wall > 0 else 0.0,
        "mean_prompt_tokens": _mean([r.prompt_tokens for r in ok if r.prompt_tokens is not None]),
        "ttft_ms": distribution_ms([r.ttft_s for r in ok if r.ttft_s is not None]),
        "itl_ms": gap_distribution_ms(itl),
        "tpot_ms": distribution_ms([t for r in ok if (t := r.tpot_s) is not None]),
        "e2e_ms": distribution_ms([r.e2e_s for r in ok if r.e2e_s is not None]),
        "chunk_gap_ms": gap_distribution_ms(chunk_gaps),
        "tokens": _token_accounting(ok),
        "prefix_cache": _prefix_cache(ok),
        "client": _client_health(run),
        "aborted": next((w.aborted for w in run.workers if w.aborted), None),
        "lost_workers": run.lost_workers,
        "interrupted": run.interrupted,
    }
    summary["goodput"] = _goodput(ok, slo, wall) if slo.active else None
    summary["roofline"] = _roofline(summary, ok, wall, roofline) if roofline else None
    return summary


def _mean(values: list[int]) -> float | None:
    return sum(values) / len(values) if values else None


def _token_accounting(ok: list[RequestRecord]) -> dict[str, object]:
    """Where counts came from and every way they disagree (docs: "Token counts")."""
    sources = Counter(r.token_source for r in ok)
    return {
        "source": dict(sources),
        "per_chunk_counts_requests": sum(1 for r in ok if r.per_chunk_counts),
        "short_of_requested": sum(1 for r in ok if r.output_tokens < r.requested_tokens),
        "over_requested": sum(1 for r in ok if r.output_tokens > r.requested_tokens),
        "arrived_vs_reported_mismatch": sum(
            1 for r in ok if r.token_source == "server" and r.arrived_tokens != r.output_tokens
        ),
        "requested_per_request": ok[0].requested_tokens if ok else None,
        "mean_output_tokens": _mean([r.output_tokens for r in ok]),
    }


def _prefix_cache(ok: list[RequestRecord]) -> dict[str, object]:
    """What the server says it served from its prefix cache (SGLang's cached_tokens), if it says."""
    reported = [r for r in ok if r.cached_tokens is not None]
    cached = sum(r.cached_tokens or 0 for r in reported)
    prompt = sum(r.prompt_tokens or 0 for r in reported)
    return {
        "requests_reporting": len(reported),
        "requests_with_hits": sum(1 for r in reported if r.cached_tokens),
        "cached_tokens": cached,
        "prompt_tokens": prompt,
        "hit_rate": round(cached / prompt, 4) if prompt else None,
    }


def _client_health(run: StageRun) -> dict[str, object]:
    cpu_fractions = [w.cpu_s / w.wall_s for w in run.workers if w.wall_s > 0]
    lags = sorted(lag for w in run.workers for lag in w.loop_lag_s)
    cpu = max(cpu_fractions) if cpu_fractions else 0.0
    lag_p90 = percentile_sorted(lags, 90.0) if lags else 0.0
    lag_p99 = percentile_sorted(lags, 99.0) if lags else 0.0
    reasons = []
    if cpu >= CLIENT_CPU_SATURATION_FRACTION:
        reasons.append(
            f"a client worker used {cpu:.0%} of a core (limit {CLIENT_CPU_SATURATION_FRACTION:.0%})"
        )
    if lag_p90 >= CLIENT_LOOP_LAG_P90_LIMIT_S:
        limit_ms = CLIENT_LOOP_LAG_P90_LIMIT_S * MS
        reasons.append(f"event-loop lag p90 {lag_p90 * MS:.1f} ms (limit {limit_ms:.0f} ms)")
    return {
        "workers": len(run.workers),
        "cpu_fraction_max": cpu,
        "loop_lag_p90_ms": lag_p90 * MS,
        "loop_lag_p99_ms": lag_p99 * MS,
        "loop_lag_max_ms": (lags[-1] if lags else 0.0) * MS,
        "saturated": bool(reasons),
        "saturation_reasons": reasons,
    }


def _goodput(ok: list[RequestRecord], slo: Slo, wall: float) -> dict[str, object]:
    def meets(r: RequestRecord) -> bool:
        if slo.ttft_ms is not None and (r.ttft_s is None or r.ttft_s * MS > slo.ttft_ms):
            return False
        tpot = r.tpot_s
        return not (slo.tpot_ms is not None and tpot is not None and tpot * MS > slo.tpot_ms)

    good = [r for r in ok if meets(r)]
    return {
        "slo_ttft_ms": slo.ttft_ms,
        "slo_tpot_ms": slo.tpot_ms,
        "requests_meeting_slo": len(good),
        "fraction": len(good) / len(ok) if ok else 0.0,
        "request_s": len(good) / wall if wall > 0 else 0.0,
        "output_tok_s": sum(r.output_tokens for r in good) / wall if wall > 0 else 0.0,
    }


def _roofline(
    summary: dict[str, object], ok: list[RequestRecord], wall: float, points: list[tuple[float, float]]
) -> dict[str, object] | None:
    concurrency = summary["concurrency"]
    if concurrency is None:
        # Open loop: the mean number in flight (Little's law: arrival rate x mean time in system).
        e2e_sum = sum(r.e2e_s for r in ok if r.e2e_s is not None)
        concurrency = e2e_sum / wall if wall > 0 else 0.0
    found = interpolate_roofline(points, float(concurrency))  # type: ignore[arg-type]
    if found is None:
        return None
    roof, extrapolated = found
    measured = float(summary["output_tok_s"])  # type: ignore[arg-type]
    return {
        "at_concurrency": concurrency,
        "roofline_decode_tok_s": roof,
        "efficiency": measured / roof if roof > 0 else None,
        "outside_plan_range": extrapolated,
    }
