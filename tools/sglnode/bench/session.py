"""One benchmark run as a library call: `sglnode bench` and the rollout check both run this.

A session validates its configuration, probes the target (the simulator says so), warms up, runs
each stage, writes the JSON report after every stage (partial results survive a crash or a kill),
evaluates the targets and prints the table.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from sglnode.bench.apis import API_MARKERS, API_PATHS, BodyOptions, build_body
from sglnode.bench.checks import Targets, evaluate
from sglnode.bench.loadgen import Target
from sglnode.bench.metrics import Slo, summarize
from sglnode.bench.prompts import make_prompts
from sglnode.bench.report import SCHEMA, ProgressBar, print_report, write_json
from sglnode.bench.runner import StageSpec, run_stage
from sglnode.bench.target import Endpoint, parse_url, probe_simulated

EXIT_OK = 0
EXIT_TARGET_MISSED = 1
# Distinct prompts per run: enough that a prefix cache cannot turn the run into cache hits,
# few enough that encoding them up front is instant.
PROMPT_POOL_SIZE = 64


class BenchConfigError(ValueError):
    """A configuration no run can start from (reported as a usage error)."""


@dataclass(frozen=True)
class BenchConfig:
    url: str = "http://127.0.0.1:30000"
    api: str = "generate"
    model: str = "default"
    api_key: str | None = None
    concurrency: str | None = None  # comma list; default "1"
    request_rate: str | None = None  # comma list of Poisson rates (req/s), instead of concurrency
    num_requests: int = 200
    duration_s: float = 120.0
    input_len: int = 128
    output_len: int = 256
    ignore_eos: bool = True
    continuous_usage: bool = True
    warmup: int = 4
    seed: int = 0
    workers: int = 1
    request_timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    json_path: Path | None = None
    plot_path: Path | None = None
    plan_path: Path | None = None
    progress: bool | None = None  # None: when stderr is a terminal
    targets: Targets = field(default_factory=Targets)
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None


def _numbers(text: str, kind: type[int] | type[float], flag: str) -> list[float]:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise BenchConfigError(f"{flag}: {exc}") from exc
    if not values or any(v <= 0 for v in values):
        raise BenchConfigError(f"{flag}: give positive numbers, comma-separated (got {text!r})")
    return values


def load_plan(path: Path) -> list[tuple[float, float]]:
    try:
        data = json.loads(path.read_text())
        points = [(float(p["concurrency"]), float(p["decode_tok_s"])) for p in data["roofline"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise BenchConfigError(
            f"--plan {path}: not a `sglnode plan --json` file with a roofline ({exc})"
        ) from exc
    if not points:
        raise BenchConfigError(f"--plan {path}: the roofline list is empty")
    return points


def stages(config: BenchConfig) -> list[StageSpec]:
    if config.request_rate:
        rates = _numbers(config.request_rate, float, "--request-rate")
        return [StageSpec(f"rate={r:g}/s", None, r, config.num_requests, config.duration_s) for r in rates]
    levels = _numbers(config.concurrency or "1", int, "--concurrency")
    return [StageSpec(f"c={c}", int(c), None, config.num_requests, config.duration_s) for c in levels]


def check_config(config: BenchConfig) -> None:
    for flag in ("num_requests", "input_len", "output_len", "workers"):
        if getattr(config, flag) < 1:
            raise BenchConfigError(f"--{flag.replace('_', '-')} must be >= 1")
    for flag, value in (
        ("duration", config.duration_s),
        ("request-timeout", config.request_timeout_s),
        ("stall-timeout", config.stall_timeout_s),
        ("connect-timeout", config.connect_timeout_s),
    ):
        if value <= 0:
            raise BenchConfigError(f"--{flag} must be > 0")
    if config.warmup < 0:
        raise BenchConfigError("--warmup must be >= 0")
    if not 0.0 <= config.targets.max_error_rate <= 1.0:
        raise BenchConfigError("--max-error-rate is a fraction between 0 and 1")


def _requests(config: BenchConfig, endpoint: Endpoint) -> tuple[bytes, ...]:
    opts = BodyOptions(config.model, config.ignore_eos, config.continuous_usage)
    head = (
        f"POST {API_PATHS[config.api]} HTTP/1.1\r\nHost: {endpoint.host}:{endpoint.port}\r\n"
        "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
    )
    if config.api_key:
        head += f"Authorization: Bearer {config.api_key}\r\n"
    encoded = []
    for prompt in make_prompts(PROMPT_POOL_SIZE, config.input_len, config.seed):
        body = build_body(config.api, prompt.ids, prompt.text, config.output_len, opts)
        encoded.append(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return tuple(encoded)


def _report(
    config: BenchConfig, endpoint: Endpoint, sim: dict[str, object], summaries: list[dict[str, object]]
) -> dict[str, object]:
    return {
        "schema": SCHEMA,
        "complete": False,
        "target": {"url": endpoint.base_url, "api": config.api, "model": config.model, **sim},
        "config": {
            "input_len": config.input_len,
            "output_len": config.output_len,
            "ignore_eos": config.ignore_eos,
            "continuous_usage": config.continuous_usage,
            "num_requests": config.num_requests,
            "duration_s": config.duration_s,
            "warmup": config.warmup,
            "workers": config.workers,
            "seed": config.seed,
            "request_timeout_s": config.request_timeout_s,
            "stall_timeout_s": config.stall_timeout_s,
        },
        "stages": summaries,
        "client_saturated": any(s["client"]["saturated"] for s in summaries),  # type: ignore[index]
        "checks": {"enabled": False, "passed": None, "failures": []},
    }


def run_session(
    config: BenchConfig, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> tuple[int, dict[str, object]]:
    """Run the benchmark; (exit code, report). Raises BenchConfigError before any request is sent."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    check_config(config)
    endpoint = parse_url(config.url)
    specs = stages(config)
    roofline = load_plan(config.plan_path) if config.plan_path else None

    sim = probe_simulated(endpoint.base_url, config.api_key)
    target = Target(
        host=endpoint.host,
        port=endpoint.port,
        markers=API_MARKERS[config.api],
        requests=_requests(config, endpoint),
        requested_tokens=config.output_len,
        connect_timeout_s=config.connect_timeout_s,
        request_timeout_s=config.request_timeout_s,
        stall_timeout_s=config.stall_timeout_s,
    )
    bar = ProgressBar(err, err.isatty() if config.progress is None else config.progress)
    if config.warmup:
        first = specs[0].concurrency or 1
        warm = StageSpec("warmup", min(first, config.warmup), None, config.warmup, config.duration_s)
        bar.start("warmup", config.warmup)
        run_stage(target, warm, 1, config.seed, bar.update)
        bar.finish()

    slo = Slo(config.slo_ttft_ms, config.slo_tpot_ms)
    summaries: list[dict[str, object]] = []
    for spec in specs:
        bar.start(spec.label, spec.num_requests)
        stage_run = run_stage(target, spec, config.workers, config.seed, bar.update)
        bar.finish()
        summaries.append(summarize(stage_run, slo, roofline))
        if config.json_path:  # partial results survive a later crash or kill
            write_json(config.json_path, _report(config, endpoint, sim, summaries))
        if summaries[-1]["aborted"]:
            break

    report = _report(config, endpoint, sim, summaries)
    targets = config.targets
    failures = evaluate(summaries, targets)
    enabled = any(
        v is not None for v in (targets.min_output_tok_s, targets.max_ttft_p99_ms, targets.max_itl_p99_ms)
    )
    report["checks"] = {"enabled": enabled, "passed": not failures, "failures": failures}
    report["complete"] = len(summaries) == len(specs)
    code = EXIT_TARGET_MISSED if failures else EXIT_OK
    report["exit_code"] = code
    if config.json_path:
        write_json(config.json_path, report)
    if config.plot_path and summaries:
        from sglnode.bench.plot import plot_sweep  # noqa: PLC0415 - matplotlib only when asked

        plot_sweep(summaries, config.plot_path, bool(sim["simulated"]))
    print_report(report, out)
    return code, report
