"""`sglnode wait`: block until an SGLang server is ready, or say why it is not.

Exit codes: 0 ready, 2 crashed (diagnosis printed), 3 timed out, 4 unreachable (nothing
listening and no log; without a log source, after --connect-grace seconds of refused
connections), 64 usage error, 130/143 interrupted by SIGINT/SIGTERM. `--json` prints one object
(docs/diagnose.md) on stdout.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path
from typing import TextIO

from sglnode.argtypes import seconds
from sglnode.exitcodes import EXIT_USAGE
from sglnode.interrupts import guarded, raise_on_signals
from sglnode.pins import PINS
from sglnode.readiness.client import DEFAULT_TIMEOUT_S as DEFAULT_PROBE_TIMEOUT_S
from sglnode.readiness.client import UrlError, parse_base_url
from sglnode.readiness.logwatch import FileFollower, compose_follower, docker_follower, journal_follower
from sglnode.readiness.startup import ProgressDisplay
from sglnode.readiness.waiter import (
    DEFAULT_CONNECT_GRACE_S,
    Follower,
    Outcome,
    WaitOptions,
    WaitResult,
    wait_for_server,
)

DEFAULT_TIMEOUT_S = 1800.0  # large MoE checkpoints take 10-20 min to load; 30 min covers them
MIN_PROBE_TIMEOUT_S = 0.5


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "wait",
        help="wait for an SGLang server (or router) to be ready; diagnose it if it dies",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--url", help=f"server or router base URL, e.g. http://127.0.0.1:{PINS.ports.sglang}")
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
    parser.add_argument(
        "--timeout", type=seconds(), default=DEFAULT_TIMEOUT_S, help="seconds (default 1800, at most a week)"
    )
    parser.add_argument(
        "--connect-grace",
        type=seconds(above=False),
        default=DEFAULT_CONNECT_GRACE_S,
        help="without a log source: seconds of refused connections before giving up as unreachable "
        f"(default {DEFAULT_CONNECT_GRACE_S:g}; SGLang opens its port only after loading)",
    )
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
    if args.url is not None:
        try:
            parse_base_url(args.url)
        except UrlError as error:
            return str(error)
    if args.log is not None:
        return _log_problem(Path(args.log))
    return None


def _log_problem(log: Path) -> str | None:
    """A --log that can never be followed; a file that does not exist yet is fine (tail -F)."""
    if log.is_dir():
        return f"--log {log} is a directory; give the server's log file"
    if log.exists() and not os.access(log, os.R_OK):
        return f"--log {log} is not readable by this user"
    if not log.exists() and not log.parent.is_dir():
        return f"--log {log}: the directory {log.parent} does not exist"
    return None


def run(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    return guarded("wait", err, lambda: _run(args, out, err))


def _run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    problem = usage_error(args)
    if problem:
        err.write(f"sglnode wait: {problem}\n")
        return EXIT_USAGE
    # Progress goes to stderr when stdout carries JSON, so the JSON stays machine-readable.
    display = ProgressDisplay(err if args.json else out)
    options = WaitOptions(
        url=parse_base_url(args.url).url if args.url is not None else None,
        follower=build_follower(args),
        timeout_s=args.timeout,
        pd=args.pd,
        connect_grace_s=getattr(args, "connect_grace", DEFAULT_CONNECT_GRACE_S),
        # A short --timeout must still see a probe answer (or its absence) before it ends.
        probe_timeout_s=min(DEFAULT_PROBE_TIMEOUT_S, max(MIN_PROBE_TIMEOUT_S, args.timeout / 4)),
    )
    # Ctrl-C / SIGTERM end the wait (and `docker logs -f` / `journalctl -f`) with a result.
    with raise_on_signals():
        result = wait_for_server(options, display)
        display.close()
    if args.json:
        out.write(json.dumps(result.to_json(), indent=2) + "\n")
    else:
        out.write(render(result) + "\n")
    out.flush()
    return result.exit_code


def _unreachable_headline(result: WaitResult) -> str:
    where = f" at {result.url}" if result.url else ""
    why = result.probe.detail if result.probe is not None else "nothing listening"
    log = "no log lines" if result.log_source else "no log source to follow"
    text = f"unreachable after {result.elapsed_s:.1f}s: {why}{where}, and {log}"
    if result.url and not result.log_source:
        text += (
            " (SGLang opens its port only after loading; follow its log with --log/--container/--unit, "
            "or raise --connect-grace)"
        )
    return text


def render(result: WaitResult) -> str:
    timed_out = f"timed out after {result.elapsed_s:.1f}s (stage: {result.stage})"
    if result.reachability == "no_answer":
        timed_out += f": {result.url} accepts connections but never answered"
    headline = {
        Outcome.READY: f"ready after {result.elapsed_s:.1f}s",
        Outcome.CRASHED: f"crashed after {result.elapsed_s:.1f}s (stage: {result.stage})",
        Outcome.TIMED_OUT: timed_out,
        Outcome.UNREACHABLE: _unreachable_headline(result),
        Outcome.INTERRUPTED: (
            f"interrupted by {result.interrupted} after {result.elapsed_s:.1f}s (stage: {result.stage})"
        ),
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
