"""Terminal output (progress bar, table, loud warnings) and the JSON report.

The JSON layout is documented in docs/bench.md ("JSON report") and versioned by SCHEMA.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import TextIO

SCHEMA = "sglnode.bench/v1"
BAR_WIDTH = 30

SIMULATED_BANNER = (
    "!!! SIMULATED TARGET: these figures describe the sglnode simulator, NOT a measurement of SGLang !!!"
)
SATURATED_BANNER = (
    "!!! CLIENT SATURATED: the benchmark client may be the bottleneck; latencies are inflated and "
    "throughput is a lower bound. Add --workers or run the client on another machine. !!!"
)


class ProgressBar:
    """One line on stderr, redrawn in place; silent when stderr is not a terminal unless forced."""

    def __init__(self, stream: TextIO, enabled: bool) -> None:
        self.stream = stream
        self.enabled = enabled
        self.label = ""
        self.total = 0
        self.started = 0.0

    def start(self, label: str, total: int) -> None:
        self.label, self.total, self.started = label, total, time.monotonic()
        self.update(0)

    def update(self, done: int) -> None:
        if not self.enabled:
            return
        frac = min(done / self.total, 1.0) if self.total else 1.0
        filled = int(frac * BAR_WIDTH)
        elapsed = time.monotonic() - self.started
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        self.stream.write(f"\r{self.label:<14} [{bar}] {done}/{self.total} {elapsed:6.1f}s")
        self.stream.flush()

    def finish(self) -> None:
        if self.enabled:
            self.stream.write("\n")
            self.stream.flush()


def _fmt(value: object, digits: int = 1) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return str(value)


def _dist(stage: dict[str, object], key: str, field: str) -> object:
    dist = stage.get(key)
    return dist.get(field) if isinstance(dist, dict) else None


TABLE_COLUMNS = (
    ("stage", lambda s: s["label"], 0),
    ("ok/sent", lambda s: f"{s['requests']['ok']}/{s['requests']['sent']}", 0),
    ("out tok/s", lambda s: s["output_tok_s"], 0),
    ("req/s", lambda s: s["request_s"], 2),
    ("TTFT p50", lambda s: _dist(s, "ttft_ms", "p50"), 1),
    ("TTFT p99", lambda s: _dist(s, "ttft_ms", "p99"), 1),
    ("ITL p50", lambda s: _dist(s, "itl_ms", "p50"), 2),
    ("ITL p99", lambda s: _dist(s, "itl_ms", "p99"), 2),
    ("TPOT p50", lambda s: _dist(s, "tpot_ms", "p50"), 2),
    ("E2E p99", lambda s: _dist(s, "e2e_ms", "p99"), 0),
    ("chunk gap p99", lambda s: _dist(s, "chunk_gap_ms", "p99"), 2),
    ("eff.", lambda s: (s["roofline"] or {}).get("efficiency"), 2),
    ("client", lambda s: "SATURATED" if s["client"]["saturated"] else "ok", 0),
)


def render_table(stages: list[dict[str, object]]) -> str:
    header = [name for name, _, _ in TABLE_COLUMNS]
    rows = [[_fmt(get(s), digits) for _, get, digits in TABLE_COLUMNS] for s in stages]  # type: ignore[no-untyped-call]
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)]
    lines = ["  ".join(h.rjust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.rjust(w) for c, w in zip(row, widths, strict=True)) for row in rows]
    lines.append("(times in ms; definitions: docs/bench.md)")
    return "\n".join(lines)


def warnings_for(report: dict[str, object]) -> list[str]:
    """Every loud line the terminal must show, in order of importance."""
    lines = []
    target = report["target"]
    assert isinstance(target, dict)
    if target.get("simulated"):
        lines.append(SIMULATED_BANNER)
    if report.get("client_saturated"):
        lines.append(SATURATED_BANNER)
    for stage in report["stages"]:  # type: ignore[attr-defined]
        label = stage["label"]
        for reason in stage["client"]["saturation_reasons"]:
            lines.append(f"{label}: client: {reason}")
        tokens = stage["tokens"]
        if tokens["short_of_requested"]:
            lines.append(
                f"{label}: {tokens['short_of_requested']} request(s) stopped before the requested "
                f"{tokens['requested_per_request']} tokens (throughput counts what arrived)"
            )
        if tokens["source"].get("arrived"):
            lines.append(
                f"{label}: {tokens['source']['arrived']} request(s) had no server token count; "
                "counted from the chunks that arrived"
            )
        if tokens["arrived_vs_reported_mismatch"]:
            lines.append(
                f"{label}: {tokens['arrived_vs_reported_mismatch']} request(s): chunks that arrived "
                "disagree with the server's count (multi-token chunks without per-chunk usage?)"
            )
        cache = stage.get("prefix_cache") or {}
        if cache.get("cached_tokens"):
            workload = (report.get("config") or {}).get("workload")  # type: ignore[union-attr]
            expected = (
                " (the shared-prefix workload asks for them)"
                if workload == "shared-prefix"
                else (": every prompt of this run is distinct, so latency and throughput are flattered")
            )
            lines.append(
                f"{label}: the server took {cache['cached_tokens']} of {cache['prompt_tokens']} prompt "
                f"tokens ({cache['hit_rate']:.0%}) from its prefix cache in "
                f"{cache['requests_with_hits']} request(s)" + expected
            )
        if stage["aborted"]:
            lines.append(f"{label}: ABORTED: {stage['aborted']}")
        if stage["requests"]["errors"]:
            lines.append(f"{label}: errors: {stage['requests']['errors_by_reason']}")
    return lines


def write_json(path: Path, report: dict[str, object]) -> None:
    """Write atomically so a run killed mid-write never leaves half a file."""
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(report, indent=2, default=_json_default) + "\n")
    os.replace(tmp, path)


def _json_default(value: object) -> object:
    if isinstance(value, float):  # pragma: no cover - floats serialise natively
        return value
    return str(value)


def print_report(report: dict[str, object], stream: TextIO | None = None) -> None:
    stream = stream or sys.stdout
    for line in warnings_for(report):
        print(line, file=stream)
    print(render_table(report["stages"]), file=stream)  # type: ignore[arg-type]
    for line in warnings_for(report)[:2]:  # repeat the banners after the table: hard to miss
        if line.startswith("!!!"):
            print(line, file=stream)
    checks = report["checks"]
    assert isinstance(checks, dict)
    for failure in checks["failures"]:
        print(f"FAIL {failure}", file=stream)
    if checks["enabled"]:
        print("checks: " + ("PASS" if checks["passed"] else "FAIL"), file=stream)
