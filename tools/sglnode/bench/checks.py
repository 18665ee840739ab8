"""Check mode: the rollout's pass/fail targets applied to every stage (docs/bench.md, "Check mode")."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Targets:
    min_output_tok_s: float | None = None
    max_ttft_p99_ms: float | None = None
    max_itl_p99_ms: float | None = None
    max_error_rate: float = 0.0


def _p99(stage: dict[str, object], key: str) -> float | None:
    dist = stage.get(key)
    return dist.get("p99") if isinstance(dist, dict) else None  # type: ignore[return-value]


def evaluate(stages: list[dict[str, object]], targets: Targets) -> list[str]:
    """Every missed target, one sentence each; an empty list means the run passed."""
    failures: list[str] = []
    for stage in stages:
        label = stage["label"]
        requests = stage["requests"]
        assert isinstance(requests, dict)
        rate = float(requests["error_rate"])
        if rate > targets.max_error_rate:
            reasons = ", ".join(f"{k} x{v}" for k, v in requests["errors_by_reason"].items())
            failures.append(f"{label}: error rate {rate:.1%} > {targets.max_error_rate:.1%} ({reasons})")
        if stage.get("aborted"):
            failures.append(f"{label}: aborted: {stage['aborted']}")
        if stage.get("lost_workers"):
            failures.append(f"{label}: {stage['lost_workers']} client worker(s) died; their results are lost")
        if requests["ok"] == 0:
            failures.append(f"{label}: no request succeeded")
            continue
        tok_s = float(stage["output_tok_s"])  # type: ignore[arg-type]
        if targets.min_output_tok_s is not None and tok_s < targets.min_output_tok_s:
            failures.append(f"{label}: output {tok_s:,.0f} tok/s < {targets.min_output_tok_s:,.0f}")
        ttft = _p99(stage, "ttft_ms")
        if targets.max_ttft_p99_ms is not None and ttft is not None and ttft > targets.max_ttft_p99_ms:
            failures.append(f"{label}: TTFT p99 {ttft:.1f} ms > {targets.max_ttft_p99_ms:g} ms")
        itl = _p99(stage, "itl_ms")
        if targets.max_itl_p99_ms is not None and itl is not None and itl > targets.max_itl_p99_ms:
            failures.append(f"{label}: ITL p99 {itl:.1f} ms > {targets.max_itl_p99_ms:g} ms")
    return failures
