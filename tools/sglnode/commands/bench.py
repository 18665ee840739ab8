"""`sglnode bench`: drive an SGLang server (or router) and report throughput and latency.

Exit codes: 0 every stage met every target; 1 a target was missed, a request failed beyond
--max-error-rate, or the run was aborted (partial results are still written); 2 bad usage.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sglnode.bench.apis import API_MARKERS, API_NAMES, API_PATHS, BodyOptions, build_body
from sglnode.bench.checks import Targets, evaluate
from sglnode.bench.loadgen import Target
from sglnode.bench.metrics import Slo, summarize
from sglnode.bench.prompts import make_prompts
from sglnode.bench.report import SCHEMA, ProgressBar, print_report, write_json
from sglnode.bench.runner import StageSpec, run_stage
from sglnode.bench.target import Endpoint, parse_url, probe_simulated
from sglnode.exitcodes import EXIT_USAGE

EXIT_OK = 0
EXIT_TARGET_MISSED = 1
API_KEY_ENV = "SGLNODE_API_KEY"
# Distinct prompts per run: enough that a prefix cache cannot turn the run into cache hits,
# few enough that encoding them up front is instant.
PROMPT_POOL_SIZE = 64


class UsageError(ValueError):
    pass


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "bench",
        help="measure throughput and latency of an SGLang server or router",
        description="Streaming load test with TTFT / per-token ITL / TPOT / E2E (docs/bench.md).",
    )
    target = p.add_argument_group("target")
    target.add_argument("--url", default="http://127.0.0.1:30000", help="server or router base URL")
    target.add_argument("--api", choices=API_NAMES, default="generate", help="endpoint to drive")
    target.add_argument("--model", default="default", help="model name for the OpenAI endpoints")
    target.add_argument(
        "--api-key", default=os.environ.get(API_KEY_ENV), help=f"bearer token (env {API_KEY_ENV})"
    )
    load = p.add_argument_group("load")
    mode = load.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", default=None, help="comma list of fixed concurrencies, e.g. 1,16,64")
    mode.add_argument("--request-rate", default=None, help="comma list of Poisson request rates (req/s)")
    load.add_argument("--num-requests", type=int, default=200, help="requests per stage (upper bound)")
    load.add_argument("--duration", type=float, default=120.0, help="seconds per stage before no new request")
    load.add_argument("--input-len", type=int, default=128, help="prompt tokens")
    load.add_argument("--output-len", type=int, default=256, help="requested output tokens")
    load.add_argument("--no-ignore-eos", action="store_true", help="let the model stop at EOS")
    load.add_argument("--no-continuous-usage", action="store_true", help="do not ask for per-chunk usage")
    load.add_argument("--warmup", type=int, default=4, help="requests before measuring (discarded)")
    load.add_argument("--seed", type=int, default=0, help="seed for prompts and arrivals")
    load.add_argument("--workers", type=int, default=1, help="client processes (raise when saturated)")
    load.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request, end to end")
    load.add_argument("--stall-timeout", type=float, default=60.0, help="seconds without a byte = stalled")
    load.add_argument("--connect-timeout", type=float, default=10.0, help="seconds to open a connection")
    out = p.add_argument_group("output")
    out.add_argument("--json", type=Path, help="write the JSON report here (also after each stage)")
    out.add_argument("--plot", type=Path, help="write a PNG plot of the sweep here")
    out.add_argument("--plan", type=Path, help="JSON from `sglnode plan --json`: efficiency vs roofline")
    out.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bar")
    check = p.add_argument_group("check mode (non-zero exit when missed)")
    check.add_argument("--min-output-tok-s", type=float)
    check.add_argument("--max-ttft-p99-ms", type=float)
    check.add_argument("--max-itl-p99-ms", type=float)
    check.add_argument("--max-error-rate", type=float, default=0.0, help="fraction, default 0")
    check.add_argument("--slo-ttft-ms", type=float, help="goodput SLO on TTFT")
    check.add_argument("--slo-tpot-ms", type=float, help="goodput SLO on TPOT")
    p.set_defaults(func=run)


def _numbers(text: str, kind: type[int] | type[float], flag: str) -> list:  # type: ignore[type-arg]
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from exc
    if not values or any(v <= 0 for v in values):
        raise UsageError(f"{flag}: give positive numbers, comma-separated (got {text!r})")
    return values


def _load_plan(path: Path) -> list[tuple[float, float]]:
    try:
        data = json.loads(path.read_text())
        points = [(float(p["concurrency"]), float(p["decode_tok_s"])) for p in data["roofline"]]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise UsageError(f"--plan {path}: not a `sglnode plan --json` file with a roofline ({exc})") from exc
    if not points:
        raise UsageError(f"--plan {path}: the roofline list is empty")
    return points


def _stages(args: argparse.Namespace) -> list[StageSpec]:
    if args.request_rate:
        rates = _numbers(args.request_rate, float, "--request-rate")
        return [StageSpec(f"rate={r:g}/s", None, r, args.num_requests, args.duration) for r in rates]
    levels = _numbers(args.concurrency or "1", int, "--concurrency")
    return [StageSpec(f"c={c}", c, None, args.num_requests, args.duration) for c in levels]


def _validate(args: argparse.Namespace) -> None:
    for flag in ("num_requests", "input_len", "output_len", "workers"):
        if getattr(args, flag) < 1:
            raise UsageError(f"--{flag.replace('_', '-')} must be >= 1")
    for flag in ("duration", "request_timeout", "stall_timeout", "connect_timeout"):
        if getattr(args, flag) <= 0:
            raise UsageError(f"--{flag.replace('_', '-')} must be > 0")
    if args.warmup < 0:
        raise UsageError("--warmup must be >= 0")
    if not 0.0 <= args.max_error_rate <= 1.0:
        raise UsageError("--max-error-rate is a fraction between 0 and 1")


def _requests(args: argparse.Namespace, endpoint: Endpoint) -> tuple[bytes, ...]:
    opts = BodyOptions(args.model, not args.no_ignore_eos, not args.no_continuous_usage)
    head = (
        f"POST {API_PATHS[args.api]} HTTP/1.1\r\nHost: {endpoint.host}:{endpoint.port}\r\n"
        "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
    )
    if args.api_key:
        head += f"Authorization: Bearer {args.api_key}\r\n"
    encoded = []
    for prompt in make_prompts(PROMPT_POOL_SIZE, args.input_len, args.seed):
        body = build_body(args.api, prompt.ids, prompt.text, args.output_len, opts)
        encoded.append(f"{head}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    return tuple(encoded)


def _report(
    args: argparse.Namespace, endpoint: Endpoint, sim: dict[str, object], stages: list[dict[str, object]]
) -> dict[str, object]:
    return {
        "schema": SCHEMA,
        "complete": False,
        "target": {"url": endpoint.base_url, "api": args.api, "model": args.model, **sim},
        "config": {
            "input_len": args.input_len,
            "output_len": args.output_len,
            "ignore_eos": not args.no_ignore_eos,
            "continuous_usage": not args.no_continuous_usage,
            "num_requests": args.num_requests,
            "duration_s": args.duration,
            "warmup": args.warmup,
            "workers": args.workers,
            "seed": args.seed,
            "request_timeout_s": args.request_timeout,
            "stall_timeout_s": args.stall_timeout,
        },
        "stages": stages,
        "client_saturated": any(s["client"]["saturated"] for s in stages),  # type: ignore[index]
        "checks": {"enabled": False, "passed": None, "failures": []},
    }


def run(args: argparse.Namespace) -> int:
    try:
        _validate(args)
        endpoint = parse_url(args.url)
        specs = _stages(args)
        roofline = _load_plan(args.plan) if args.plan else None
    except UsageError as exc:
        print(f"sglnode bench: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except ValueError as exc:
        print(f"sglnode bench: {exc}", file=sys.stderr)
        return EXIT_USAGE

    sim = probe_simulated(endpoint.base_url, args.api_key)
    target = Target(
        host=endpoint.host,
        port=endpoint.port,
        markers=API_MARKERS[args.api],
        requests=_requests(args, endpoint),
        requested_tokens=args.output_len,
        connect_timeout_s=args.connect_timeout,
        request_timeout_s=args.request_timeout,
        stall_timeout_s=args.stall_timeout,
    )
    show = sys.stderr.isatty() if args.progress is None else args.progress
    bar = ProgressBar(sys.stderr, show)
    if args.warmup:
        first = specs[0].concurrency or 1
        warm = StageSpec("warmup", min(first, args.warmup), None, args.warmup, args.duration)
        bar.start("warmup", args.warmup)
        run_stage(target, warm, 1, args.seed, bar.update)
        bar.finish()

    slo = Slo(args.slo_ttft_ms, args.slo_tpot_ms)
    summaries: list[dict[str, object]] = []
    for spec in specs:
        bar.start(spec.label, spec.num_requests)
        stage_run = run_stage(target, spec, args.workers, args.seed, bar.update)
        bar.finish()
        summaries.append(summarize(stage_run, slo, roofline))
        if args.json:  # partial results survive a later crash or kill
            write_json(args.json, _report(args, endpoint, sim, summaries))
        if summaries[-1]["aborted"]:
            break

    report = _report(args, endpoint, sim, summaries)
    targets = Targets(args.min_output_tok_s, args.max_ttft_p99_ms, args.max_itl_p99_ms, args.max_error_rate)
    failures = evaluate(summaries, targets)
    enabled = any(v is not None for v in (args.min_output_tok_s, args.max_ttft_p99_ms, args.max_itl_p99_ms))
    report["checks"] = {"enabled": enabled, "passed": not failures, "failures": failures}
    report["complete"] = len(summaries) == len(specs)
    code = EXIT_TARGET_MISSED if failures else EXIT_OK
    report["exit_code"] = code
    if args.json:
        write_json(args.json, report)
    if args.plot and summaries:
        from sglnode.bench.plot import plot_sweep  # noqa: PLC0415 - matplotlib only when asked

        plot_sweep(summaries, args.plot, bool(sim["simulated"]))
    print_report(report)
    return code
