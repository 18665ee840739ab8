"""This node's all-reduce measurements (inimage/allreduce_sweep.py's JSON) and what the sweep does with
them: rank the NCCL env variants by latency in the decode band for a TP size, drop the ones that
failed on this node (a hang at the first all-reduce is the classic PCIe + IOMMU/ACS failure).

Decode sends one small all-reduce per layer and sublayer (batch x hidden x 2 bytes), so the variant
that wins the decode band usually wins output tok/s at low concurrency; prefill-size messages are
reported as bus bandwidth for the large-size end, and the sweep benchmarks both sides anyway.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SCHEMA = 1
KIND = "sglnode-allreduce-sweep"


class MeasurementError(ValueError):
    """The file is not an all-reduce sweep this version reads."""


@dataclass(frozen=True)
class SizePoint:
    bytes: int
    us_p50: float
    busbw_gbps: float


@dataclass(frozen=True)
class Run:
    variant: str
    env: dict[str, str]
    world_size: int
    ranks: list[int]
    ok: bool
    error: str | None
    sizes: list[SizePoint] = field(default_factory=list)


@dataclass(frozen=True)
class Measurements:
    backend: str
    device: str
    plumbing_only: bool  # gloo on CPU: exercises the script, measures nothing about NCCL
    runs: list[Run]
    source: str


@dataclass(frozen=True)
class VariantScore:
    variant: str
    env: dict[str, str]
    world_size: int | None
    ok: bool
    band_us: float | None  # mean p50 latency over the decode band (microseconds)
    peak_busbw_gbps: float | None
    note: str

    def to_json(self) -> dict[str, Any]:
        return {
            "variant": self.variant,
            "env": self.env,
            "world_size": self.world_size,
            "ok": self.ok,
            "band_us": None if self.band_us is None else round(self.band_us, 2),
            "peak_busbw_gbps": None if self.peak_busbw_gbps is None else round(self.peak_busbw_gbps, 2),
            "note": self.note,
        }


def _run(raw: dict[str, Any]) -> Run:
    return Run(
        variant=str(raw["variant"]),
        env={str(k): str(v) for k, v in (raw.get("env") or {}).items()},
        world_size=int(raw["world_size"]),
        ranks=[int(r) for r in raw.get("ranks") or []],
        ok=bool(raw["ok"]),
        error=raw.get("error"),
        sizes=[
            SizePoint(int(s["bytes"]), float(s["us_p50"]), float(s.get("busbw_gbps") or 0.0))
            for s in raw.get("sizes") or []
        ],
    )


def parse_measurements(data: Any, source: str = "<allreduce>") -> Measurements:
    if not isinstance(data, dict) or data.get("kind") != KIND:
        raise MeasurementError(f"{source}: not an all-reduce sweep (kind {KIND!r} expected)")
    if data.get("schema") != SCHEMA:
        raise MeasurementError(f"{source}: schema {data.get('schema')!r}, this sglnode reads {SCHEMA}")
    try:
        runs = [_run(r) for r in data["runs"]]
    except (KeyError, TypeError, ValueError) as exc:
        raise MeasurementError(f"{source}: malformed run entry ({exc!r})") from exc
    return Measurements(
        backend=str(data.get("backend")),
        device=str(data.get("device")),
        plumbing_only=data.get("backend") != "nccl",
        runs=runs,
        source=source,
    )


def load_measurements(path: Path) -> Measurements:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise MeasurementError(f"cannot read {path}: {exc}") from exc
    return parse_measurements(data, str(path))


def _closest_world_size(sizes: set[int], world_size: int) -> int | None:
    if not sizes:
        return None
    return min(sizes, key=lambda s: (abs(s - world_size), -s))


def score_variants(
    measurements: Measurements, world_size: int, band: tuple[int, int] | list[int]
) -> list[VariantScore]:
    """Variants best first for this TP size (the nearest measured group size when it was not measured):
    working ones by their decode-band latency, then failed ones."""
    low, high = band
    chosen = _closest_world_size({r.world_size for r in measurements.runs}, world_size)
    scores: list[VariantScore] = []
    for run in measurements.runs:
        if run.world_size != chosen:
            continue
        note = "" if chosen == world_size else f"measured at {chosen} ranks (none at {world_size})"
        in_band = [p.us_p50 for p in run.sizes if low <= p.bytes <= high]
        if not run.ok or not in_band:
            why = run.error or f"no sizes in the decode band {low}-{high} B"
            scores.append(VariantScore(run.variant, run.env, chosen, False, None, None, why))
            continue
        peak = max((p.busbw_gbps for p in run.sizes), default=0.0)
        scores.append(VariantScore(run.variant, run.env, chosen, True, statistics.fmean(in_band), peak, note))
    # Several groups of one size (GPUs 0-3 and 4-7): keep each variant's worst group, the one
    # every TP server of that size must live with.
    merged: dict[str, VariantScore] = {}
    for score in scores:
        seen = merged.get(score.variant)
        if seen is None:
            merged[score.variant] = score
        elif seen.ok and (not score.ok or (score.band_us or 0.0) > (seen.band_us or 0.0)):
            merged[score.variant] = score  # a failure in any group, or the slower group, stays
    return sorted(merged.values(), key=lambda s: (not s.ok, s.band_us if s.band_us is not None else 0.0))


@dataclass(frozen=True)
class NcclChoice:
    """The NCCL variants a sweep runs, in order, and what happened to the others."""

    variants: list[tuple[str, dict[str, str]]]
    dropped: dict[str, str]
    scores: list[VariantScore]
    source: str | None

    def to_json(self) -> dict[str, Any]:
        return {
            "source": self.source,
            "order": [name for name, _ in self.variants],
            "dropped": self.dropped,
            "scores": [s.to_json() for s in self.scores],
        }


def choose_variants(
    declared: dict[str, dict[str, str]],
    measurements: Measurements | None,
    world_size: int,
    band: tuple[int, int] | list[int],
    top: int | None,
) -> NcclChoice:
    """Declared variants (spec order) when nothing was measured; otherwise measured-best first,
    failed ones dropped, measured-only variants added from the file, unmeasured declared ones last."""
    if measurements is None:
        return NcclChoice(list(declared.items()), {}, [], None)
    scores = score_variants(measurements, world_size, band)
    dropped: dict[str, str] = {}
    ordered: list[tuple[str, dict[str, str]]] = []
    for score in scores:
        if not score.ok:
            dropped[score.variant] = f"all-reduce failed on this node: {score.note}"
            continue
        ordered.append((score.variant, declared.get(score.variant, score.env)))
    if top is not None:
        for name, _ in ordered[top:]:
            dropped[name] = f"not among the {top} fastest in the decode band"
        ordered = ordered[:top]
    measured = {s.variant for s in scores}
    ordered += [(name, env) for name, env in declared.items() if name not in measured]
    return NcclChoice(ordered, dropped, scores, measurements.source)
