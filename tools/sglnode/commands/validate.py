"""`sglnode validate`: the rollout check of a deployed topology (readiness, then a benchmark).

Exit codes: 0 every server ready and every benchmark target met; 1 a target was missed; 2 a server
crashed (diagnosis in the report); 3 timed out; 4 unreachable; 64 bad usage or an invalid topology;
70 a bug in sglnode; 130/143 interrupted by SIGINT/SIGTERM (the report says how far it got).
Writes report.md, report.json, bench.json, bench.png (with matplotlib) and plan.json to --report-dir.

Targets: --targets JSON (the role's sglang_validate_targets), or one flag each; a throughput or
latency target is one number for every stage or per concurrency, e.g. --min-output-tok-s 1:100,4:300.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from sglnode.argtypes import number, seconds
from sglnode.bench.checks import THRESHOLD_FLAGS
from sglnode.exitcodes import EXIT_USAGE
from sglnode.interrupts import guarded, raise_on_signals
from sglnode.pins import PINS
from sglnode.rollout import BenchSettings, RolloutSettings, run_rollout_check, targets_from_settings
from sglnode.topology.check import check_topology, format_problems
from sglnode.topology.model import TopologyFileError, read_topology_file

TARGET_FLAGS = (*THRESHOLD_FLAGS, "max_error_rate")


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
    parser.add_argument("--gpu", default=PINS.gpu.preset, help="GPU preset for the roofline")
    parser.add_argument(
        "--timeout", type=seconds(), default=1800.0, help="seconds each server may take to start"
    )
    parser.add_argument("--simulated", action="store_true", help="the servers are the simulator (labels it)")
    bench = parser.add_argument_group("benchmark")
    bench.add_argument("--api", default="chat", choices=("generate", "completions", "chat"))
    bench.add_argument("--concurrency", default="1,4,16")
    bench.add_argument("--num-requests", type=number(int, 1, 10_000_000), default=48)
    bench.add_argument("--duration", type=seconds(), default=60.0)
    bench.add_argument("--input-len", type=number(int, 1, 1 << 20), default=256)
    bench.add_argument("--output-len", type=number(int, 1, 1 << 20), default=128)
    bench.add_argument("--targets", help='JSON object of targets, e.g. {"min_output_tok_s": {"1": 100}}')
    for flag in TARGET_FLAGS:
        bench.add_argument(f"--{flag.replace('_', '-')}", help="a number, or per concurrency: 1:100,4:300")
    parser.set_defaults(func=run)


def _targets(args: argparse.Namespace) -> dict[str, object]:
    targets: dict[str, object] = {}
    if args.targets:
        try:
            loaded = json.loads(args.targets)
        except ValueError as exc:
            raise ValueError(f"--targets is not JSON: {exc}") from None
        if not isinstance(loaded, dict):
            raise ValueError("--targets must be a JSON object")
        targets.update(loaded)
    for flag in TARGET_FLAGS:
        value = getattr(args, flag)
        if value is not None:
            targets[flag] = float(value) if flag == "max_error_rate" else value
    targets_from_settings(targets)  # refuse a bad one now, before any wait
    return targets


def _report_dir_problem(path: Path) -> str | None:
    if path.exists() and not path.is_dir():
        return f"--report-dir {path} is a file; give a directory"
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not os.access(existing, os.W_OK | os.X_OK):
        return f"--report-dir {path}: {existing} is not writable by this user"
    return None


def run(args: argparse.Namespace) -> int:
    return guarded("validate", sys.stderr, lambda: _run(args))


def _run(args: argparse.Namespace) -> int:
    try:
        topology, problems = check_topology(read_topology_file(args.topology))
    except TopologyFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    if problems:
        print(format_problems(problems), file=sys.stderr)
        return EXIT_USAGE
    try:
        targets = _targets(args)
    except ValueError as exc:
        print(f"sglnode validate: {exc}", file=sys.stderr)
        return EXIT_USAGE
    problem = _report_dir_problem(args.report_dir)
    if problem:
        print(f"sglnode validate: {problem}", file=sys.stderr)
        return EXIT_USAGE
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
    with raise_on_signals():
        outcome = run_rollout_check(topology, settings, simulated_runtime=args.simulated)
    print((args.report_dir / "report.md").read_text())
    return int(outcome["exit_code"])
