"""Check mode: the rollout's pass/fail targets, per stage (docs/bench.md, "Check mode").

Throughput and latency depend on the load: one decoding server's roofline for the default topology
is ~206 output tok/s at concurrency 1 and ~1,278 at 16 (`sglnode plan`), so a single number is
either unreachable at c=1 or meaningless at c=16. A threshold is therefore one number for every
stage, or a map from the stage's concurrency (or request rate) to a number: `1:100,4:300,16:600`.
A stage that a map does not name is not checked for that target, and the report says so.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

# One number for every stage, or {concurrency (or rate): number}.
Threshold = float | dict[float, float]
THRESHOLD_FLAGS = ("min_output_tok_s", "max_ttft_p99_ms", "max_itl_p99_ms")


@dataclass(frozen=True)
class Targets:
    min_output_tok_s: Threshold | None = None
    max_ttft_p99_ms: Threshold | None = None
    max_itl_p99_ms: Threshold | None = None
    max_error_rate: float = 0.0

    @property
    def enabled(self) -> bool:
        return any(getattr(self, name) is not None for name in THRESHOLD_FLAGS)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"max_error_rate": self.max_error_rate}
        for name in THRESHOLD_FLAGS:
            value = getattr(self, name)
            out[name] = {f"{k:g}": v for k, v in value.items()} if isinstance(value, dict) else value
        return out


def _positive(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{what}: {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{what}: must be a finite number > 0 (got {text!r})")
    return value


def parse_threshold(text: str, flag: str) -> Threshold:
    """`300` (every stage) or `1:150,4:300,16:600` (per concurrency or request rate)."""
    if ":" not in text:
        return _positive(text.strip(), flag)
    per_stage: dict[float, float] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition(":")
        if not sep:
            raise ValueError(f"{flag}: {item!r} is not CONCURRENCY:VALUE (e.g. 1:150,4:300)")
        per_stage[_positive(key.strip(), f"{flag} key")] = _positive(value.strip(), flag)
    if not per_stage:
        raise ValueError(f"{flag}: no CONCURRENCY:VALUE pair in {text!r}")
    return per_stage


def threshold_from_data(value: object, name: str) -> Threshold:
    """A threshold from YAML/JSON (the role's targets): a number or a mapping of numbers."""
    if isinstance(value, Mapping):
        return parse_threshold(",".join(f"{k}:{v}" for k, v in value.items()), name)
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{name}: give a number or a mapping of concurrency to number (got {value!r})")
    return parse_threshold(str(value), name)


def stage_key(stage: Mapping[str, object]) -> float | None:
    value = stage.get("concurrency")
    if value is None:
        value = stage.get("request_rate")
    return float(value) if isinstance(value, int | float) else None


def threshold_for(threshold: Threshold | None, stage: Mapping[str, object]) -> float | None:
    if threshold is None or not isinstance(threshold, dict):
        return threshold
    key = stage_key(stage)
    return threshold.get(key) if key is not None else None


def unchecked(targets: Targets, stages: list[dict[str, object]]) -> list[str]:
    """Stages a per-stage map leaves out, and map keys no stage ran: said aloud, never silent."""
    notes = []
    keys = {stage_key(s) for s in stages}
    for name in THRESHOLD_FLAGS:
        value = getattr(targets, name)
        if not isinstance(value, dict):
            continue
        for stage in stages:
            if stage_key(stage) not in value:
                notes.append(f"{stage['label']}: no {name} target for this stage; not checked")
        for key in sorted(set(value) - keys):
            notes.append(f"{name}: the target for {key:g} matches no stage of this run")
    return notes


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
        floor = threshold_for(targets.min_output_tok_s, stage)
        if floor is not None and tok_s < floor:
            failures.append(f"{label}: output {tok_s:,.0f} tok/s < {floor:,.0f}")
        ttft = _p99(stage, "ttft_ms")
        limit = threshold_for(targets.max_ttft_p99_ms, stage)
        if limit is not None and ttft is not None and ttft > limit:
            failures.append(f"{label}: TTFT p99 {ttft:.1f} ms > {limit:g} ms")
        itl = _p99(stage, "itl_ms")
        limit = threshold_for(targets.max_itl_p99_ms, stage)
        if limit is not None and itl is not None and itl > limit:
            failures.append(f"{label}: ITL p99 {itl:.1f} ms > {limit:g} ms")
    return failures
