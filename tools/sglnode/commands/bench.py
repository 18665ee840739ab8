"""`sglnode bench`: drive an SGLang server (or router) and report throughput and latency.

Exit codes: 0 every stage met every target; 1 a target was missed, a request failed beyond
--max-error-rate, or the run was aborted (partial results are still written); 64 bad usage
(nothing was sent); 70 a bug in sglnode; 130/143 interrupted by SIGINT/SIGTERM (the partial
report is written, marked "complete": false and "interrupted").
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TextIO

from sglnode.argtypes import number, seconds
from sglnode.bench.apis import API_NAMES
from sglnode.bench.checks import THRESHOLD_FLAGS, Targets, parse_threshold
from sglnode.bench.prompts import WORKLOADS
from sglnode.bench.session import (
    MAX_NUM_REQUESTS,
    MAX_TOKENS,
    MAX_WORKERS,
    BenchConfig,
    BenchConfigError,
    run_session,
)
from sglnode.exitcodes import EXIT_USAGE
from sglnode.interrupts import guarded
from sglnode.pins import PINS

API_KEY_ENV = "SGLNODE_API_KEY"
PER_STAGE_HELP = "one number for every stage, or per concurrency/rate: 1:150,4:300,16:600"


def register(subparsers: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    p = subparsers.add_parser(
        "bench",
        help="measure throughput and latency of an SGLang server or router",
        description="Streaming load test with TTFT / per-token ITL / TPOT / E2E (docs/bench.md).",
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    target = p.add_argument_group("target")
    target.add_argument(
        "--url", default=f"http://127.0.0.1:{PINS.ports.sglang}", help="server or router base URL"
    )
    target.add_argument("--api", choices=API_NAMES, default="generate", help="endpoint to drive")
    target.add_argument("--model", default="default", help="model name for the OpenAI endpoints")
    target.add_argument(
        "--api-key", default=os.environ.get(API_KEY_ENV), help=f"bearer token (env {API_KEY_ENV})"
    )
    load = p.add_argument_group("load")
    mode = load.add_mutually_exclusive_group()
    mode.add_argument("--concurrency", default=None, help="comma list of fixed concurrencies, e.g. 1,16,64")
    mode.add_argument("--request-rate", default=None, help="comma list of request rates (req/s), open loop")
    load.add_argument(
        "--burstiness",
        type=number(float, 0.0, 1000.0, above=True),
        default=1.0,
        help="with --request-rate: gamma shape of the arrival gaps (1 = Poisson, < 1 burstier)",
    )
    load.add_argument(
        "--num-requests",
        type=number(int, 1, MAX_NUM_REQUESTS),
        default=200,
        help="requests per stage (upper bound)",
    )
    load.add_argument(
        "--duration", type=seconds(), default=120.0, help="seconds per stage before no new request"
    )
    load.add_argument("--input-len", type=number(int, 1, MAX_TOKENS), default=128, help="prompt tokens")
    load.add_argument(
        "--output-len", type=number(int, 1, MAX_TOKENS), default=256, help="requested output tokens"
    )
    load.add_argument(
        "--workload",
        choices=WORKLOADS,
        default="random-ids",
        help="random-ids: a distinct prompt per request (no prefix-cache hits); "
        "shared-prefix: --prefix-groups fixed prefixes of --prefix-len tokens (cache_aware routing)",
    )
    load.add_argument("--prefix-len", type=number(int, 0, MAX_TOKENS), default=0, help="shared-prefix tokens")
    load.add_argument(
        "--prefix-groups", type=number(int, 1, 1 << 20), default=1, help="distinct shared prefixes"
    )
    load.add_argument("--no-ignore-eos", action="store_true", help="let the model stop at EOS")
    load.add_argument("--no-continuous-usage", action="store_true", help="do not ask for per-chunk usage")
    load.add_argument(
        "--no-flush-cache", action="store_true", help="do not POST /flush_cache before each stage"
    )
    load.add_argument(
        "--warmup",
        type=number(int, 0, MAX_NUM_REQUESTS),
        default=4,
        help="requests before measuring (discarded)",
    )
    load.add_argument(
        "--seed", type=number(int, 0, 2**63 - 1), default=0, help="seed for prompts and arrivals"
    )
    load.add_argument(
        "--workers",
        type=number(int, 1, MAX_WORKERS),
        default=1,
        help="client processes (raise when saturated)",
    )
    load.add_argument(
        "--request-timeout", type=seconds(), default=600.0, help="seconds per request, end to end"
    )
    load.add_argument(
        "--stall-timeout", type=seconds(), default=60.0, help="seconds without a byte = stalled"
    )
    load.add_argument("--connect-timeout", type=seconds(), default=10.0, help="seconds to open a connection")
    out = p.add_argument_group("output")
    out.add_argument("--json", type=Path, help="write the JSON report here (also after each stage)")
    out.add_argument("--plot", type=Path, help="write a PNG plot of the sweep here (needs matplotlib)")
    out.add_argument("--plan", type=Path, help="JSON from `sglnode plan --json`: efficiency vs roofline")
    out.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None, help="progress bar")
    check = p.add_argument_group("check mode (non-zero exit when missed)")
    check.add_argument("--min-output-tok-s", help=PER_STAGE_HELP)
    check.add_argument("--max-ttft-p99-ms", help=PER_STAGE_HELP)
    check.add_argument("--max-itl-p99-ms", help=PER_STAGE_HELP)
    check.add_argument(
        "--max-error-rate", type=number(float, 0.0, 1.0), default=0.0, help="fraction, default 0"
    )
    check.add_argument("--slo-ttft-ms", type=number(float, 0.0, 1e9, above=True), help="goodput SLO on TTFT")
    check.add_argument("--slo-tpot-ms", type=number(float, 0.0, 1e9, above=True), help="goodput SLO on TPOT")
    p.set_defaults(func=run)


def targets_from_args(args: argparse.Namespace) -> Targets:
    thresholds = {}
    for name in THRESHOLD_FLAGS:
        text = getattr(args, name)
        try:
            thresholds[name] = (
                None if text is None else parse_threshold(str(text), "--" + name.replace("_", "-"))
            )
        except ValueError as exc:
            raise BenchConfigError(str(exc)) from None
    return Targets(**thresholds, max_error_rate=args.max_error_rate)


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        url=args.url,
        api=args.api,
        model=args.model,
        api_key=args.api_key,
        concurrency=args.concurrency,
        request_rate=args.request_rate,
        burstiness=args.burstiness,
        num_requests=args.num_requests,
        duration_s=args.duration,
        input_len=args.input_len,
        output_len=args.output_len,
        workload=args.workload,
        prefix_len=args.prefix_len,
        prefix_groups=args.prefix_groups,
        ignore_eos=not args.no_ignore_eos,
        continuous_usage=not args.no_continuous_usage,
        flush_cache=not args.no_flush_cache,
        warmup=args.warmup,
        seed=args.seed,
        workers=args.workers,
        request_timeout_s=args.request_timeout,
        stall_timeout_s=args.stall_timeout,
        connect_timeout_s=args.connect_timeout,
        json_path=args.json,
        plot_path=args.plot,
        plan_path=args.plan,
        progress=args.progress,
        targets=targets_from_args(args),
        slo_ttft_ms=args.slo_ttft_ms,
        slo_tpot_ms=args.slo_tpot_ms,
    )


def run(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    err = stderr if stderr is not None else sys.stderr
    return guarded("bench", err, lambda: _run(args, stdout, err))


def _run(args: argparse.Namespace, stdout: TextIO | None, err: TextIO) -> int:
    try:
        config = config_from_args(args)
        code, _ = run_session(config, stdout=stdout, stderr=err)
    except BenchConfigError as exc:  # before any request was sent
        err.write(f"sglnode bench: {exc}\n")
        return EXIT_USAGE
    return code
