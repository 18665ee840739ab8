"""`sglnode wait`: block until an SGLang server is ready, or say why it is not.

Exit codes: 0 ready, 2 crashed (diagnosis printed), 3 timed out, 4 unreachable (nothing
listening and no log). `--json` prints one object (docs/diagnose.md) on stdout.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from typing import TextIO

from sglnode.exitcodes import EXIT_USAGE
from sglnode.readiness.logwatch import FileFollower, compose_follower, docker_follower, journal_follower
from sglnode.readiness.startup import ProgressDisplay
from sglnode.readiness.waiter import Follower, Outcome, WaitOptions, WaitResult, wait_for_server

DEFAULT_TIMEOUT_S = 1800.0  # large MoE checkpoints take 10-20 min to load; 30 min covers them


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "wait",
        help="wait for an SGLang server (or router) to be ready; diagnose it if it dies",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", help="server or router base URL, e.g. http://127.0.0.1:30000")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--log", type=Path, help="server log file (followed like tail -F)")
    source.add_argument("--container", help="docker container name (docker logs -f)")
    source.add_argument("--compose-file", type=Path, help="compose file; use with --service")
    source.add_argument("--unit", help="systemd unit whose journal to follow")
    parser.add_argument("--service", help="compose service name (with --compose-file)")
    parser.add_argument(
        "--skip-existing",
        action="store_true",
        help="with --log: ignore what the file already holds (an older run appending to the same log)",
    )
    parser.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds (default 1800)")
    parser.add_argument(
        "--pd", action="store_true", help="readiness = one real generation through the router"
    )
    parser.add_argument("--json", action="store_true", help="print one JSON object on stdout")
    parser.set_defaults(func=run)


def build_follower(args: argparse.Namespace) -> Follower | None:
    if args.log is not None:
        return FileFollower(args.log, skip_existing=args.skip_existing)
    if args.container:
        return docker_follower(args.container)
    if args.compose_file is not None:
        return compose_follower(args.compose_file, args.service)
    if args.unit:
        return journal_follower(args.unit)
    return None


def usage_error(args: argparse.Namespace) -> str | None:
    if args.compose_file is not None and not args.service:
        return "--compose-file needs --service"
    if args.service and args.compose_file is None:
        return "--service only makes sense with --compose-file"
    if args.url is None and not (args.log or args.container or args.compose_file or args.unit):
        return "give --url and/or a log source (--log, --container, --compose-file/--service, --unit)"
    for needed, tool in ((args.container or args.compose_file, "docker"), (args.unit, "journalctl")):
        if needed and shutil.which(tool) is None:
            return f"{tool} is not installed here; it is needed to follow that log"
    if args.skip_existing and args.log is None:
        return "--skip-existing only applies to --log"
    if args.pd and args.url is None:
        return "--pd needs --url (the router)"
    if args.timeout <= 0:
        return "--timeout must be positive"
    return None


def run(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    problem = usage_error(args)
    if problem:
        err.write(f"sglnode wait: {problem}\n")
        return EXIT_USAGE
    # Progress goes to stderr when stdout carries JSON, so the JSON stays machine-readable.
    display = ProgressDisplay(err if args.json else out)
    options = WaitOptions(url=args.url, follower=build_follower(args), timeout_s=args.timeout, pd=args.pd)
    result = wait_for_server(options, display)
    display.close()
    if args.json:
        out.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        out.write(render(result) + "\n")
    out.flush()
    return result.exit_code


def render(result: WaitResult) -> str:
    headline = {
        Outcome.READY: f"ready after {result.elapsed_s:.1f}s",
        Outcome.CRASHED: f"crashed after {result.elapsed_s:.1f}s (stage: {result.stage})",
        Outcome.TIMED_OUT: f"timed out after {result.elapsed_s:.1f}s (stage: {result.stage})",
        Outcome.UNREACHABLE: "unreachable: nothing listening and no log lines",
    }[result.outcome]
    lines = [f"sglnode wait: {headline}"]
    if result.diagnosis is not None:
        lines.append(result.diagnosis.render())
    if result.outcome is not Outcome.READY and result.probe is not None:
        probe = result.probe
        lines.append(
            f"last probe: {probe.endpoint} -> {probe.status or probe.readiness.value} {probe.detail}"
        )
    return "\n".join(lines)
