"""`sglnode validate`: the rollout check of a deployed topology (readiness, then a benchmark).

Exit codes: 0 every server ready and every benchmark target met; 1 a target was missed; 2 a server
crashed (diagnosis in the report); 3 timed out; 4 unreachable; 64 bad usage or an invalid topology.
Writes report.md, report.json, bench.json, bench.png and plan.json to --report-dir.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from sglnode.exitcodes import EXIT_USAGE
from sglnode.rollout import BenchSettings, RolloutSettings, run_rollout_check
from sglnode.topology.check import check_topology, format_problems
from sglnode.topology.model import TopologyFileError, read_topology_file

TARGET_FLAGS = ("min_output_tok_s", "max_ttft_p99_ms", "max_itl_p99_ms", "max_error_rate")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="check a deployed topology: every server ready, then a bounded benchmark against targets",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("topology", type=Path, help="topology file (inventory/topologies/*.yml)")
    parser.add_argument("--compose-dir", type=Path, required=True, help="directory holding compose.yaml")
    parser.add_argument("--report-dir", type=Path, required=True)
    parser.add_argument("--bind-address", default="127.0.0.1", help="address the ports are published on")
    parser.add_argument("--node", help="node of a multi-node topology (default: the first)")
    parser.add_argument("--gpu", default="rtx-pro-6000-blackwell", help="GPU preset for the roofline")
    parser.add_argument("--timeout", type=float, default=1800.0, help="seconds each server may take to start")
    parser.add_argument("--simulated", action="store_true", help="the servers are the simulator (labels it)")
    bench = parser.add_argument_group("benchmark")
    bench.add_argument("--api", default="chat", choices=("generate", "completions", "chat"))
    bench.add_argument("--concurrency", default="1,4,16")
    bench.add_argument("--num-requests", type=int, default=48)
    bench.add_argument("--duration", type=float, default=60.0)
    bench.add_argument("--input-len", type=int, default=256)
    bench.add_argument("--output-len", type=int, default=128)
    for flag in TARGET_FLAGS:
        bench.add_argument(f"--{flag.replace('_', '-')}", type=float)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        topology, problems = check_topology(read_topology_file(args.topology))
    except TopologyFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if problems:
        print(format_problems(problems), file=sys.stderr)
        return EXIT_USAGE
    targets = {flag: getattr(args, flag) for flag in TARGET_FLAGS if getattr(args, flag) is not None}
    settings = RolloutSettings(
        compose_dir=args.compose_dir,
        report_dir=args.report_dir,
        bind_address=args.bind_address,
        node=args.node,
        gpu=args.gpu,
        timeout_s=args.timeout,
        api_key=os.environ.get("SGLNODE_API_KEY"),
        bench=BenchSettings(
            api=args.api,
            concurrency=args.concurrency,
            num_requests=args.num_requests,
            duration_s=args.duration,
            input_len=args.input_len,
            output_len=args.output_len,
            targets=targets,
        ),
    )
    outcome = run_rollout_check(topology, settings, simulated_runtime=args.simulated)
    print((args.report_dir / "report.md").read_text())
    return int(outcome["exit_code"])
