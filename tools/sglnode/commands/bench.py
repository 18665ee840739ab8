"""`sglnode bench`: drive an SGLang server (or router) and report throughput and latency.

Exit codes: 0 every stage met every target; 1 a target was missed, a request failed beyond
--max-error-rate, or the run was aborted (partial results are still written); 2 bad usage.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sglnode.bench.apis import API_NAMES
from sglnode.bench.checks import Targets
from sglnode.bench.session import BenchConfig, run_session
from sglnode.exitcodes import EXIT_USAGE

API_KEY_ENV = "SGLNODE_API_KEY"


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


def config_from_args(args: argparse.Namespace) -> BenchConfig:
    return BenchConfig(
        url=args.url,
        api=args.api,
        model=args.model,
        api_key=args.api_key,
        concurrency=args.concurrency,
        request_rate=args.request_rate,
        num_requests=args.num_requests,
        duration_s=args.duration,
        input_len=args.input_len,
        output_len=args.output_len,
        ignore_eos=not args.no_ignore_eos,
        continuous_usage=not args.no_continuous_usage,
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
        targets=Targets(
            args.min_output_tok_s, args.max_ttft_p99_ms, args.max_itl_p99_ms, args.max_error_rate
        ),
        slo_ttft_ms=args.slo_ttft_ms,
        slo_tpot_ms=args.slo_tpot_ms,
    )


def run(args: argparse.Namespace) -> int:
    try:
        code, _ = run_session(config_from_args(args))
    except ValueError as exc:  # BenchConfigError, or a URL parse_url refuses
        print(f"sglnode bench: {exc}", file=sys.stderr)
        return EXIT_USAGE
    return code
