"""`sglnode diagnose LOG...`: name the cause of an SGLang crash from its log(s).

Reads files (or `-` for stdin: a `docker logs` or `journalctl` capture piped in). Exit codes:
0 a cause was found, 1 no known signature (cause "unknown"), 64 usage error (unreadable file).
`--json` prints the stable schema documented in docs/diagnose.md.
"""

from __future__ import annotations

import argparse
import json
import sys
from contextlib import ExitStack
from functools import partial
from pathlib import Path
from typing import TextIO

from sglnode.diagnosis.diagnose import Diagnoser, Diagnosis, stream_oldest_first
from sglnode.diagnosis.order import NEWEST_FIRST_NOTE
from sglnode.exitcodes import EXIT_USAGE

EXIT_CAUSE_FOUND = 0
EXIT_UNKNOWN = 1


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "diagnose",
        help="classify an SGLang crash log: cause, OOM phase, evidence, fix",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("logs", nargs="+", metavar="LOG", help="log files in order ('-' reads stdin)")
    parser.add_argument("--json", action="store_true", help="print the diagnosis as JSON")
    parser.set_defaults(func=run)


def diagnose_paths(paths: list[str], stdin: TextIO | None = None) -> Diagnosis:
    """One diagnosis over all logs; each keeps its own line numbers and source name. Files are
    streamed: memory stays bounded whatever their size. A log written newest first (a log console's
    copy) is read oldest first, and the diagnosis says so."""
    diagnoser = Diagnoser()
    newest_first = False
    for path in paths:
        with ExitStack() as stack:
            if path == "-":
                handle, source, reopen = stdin or sys.stdin, "stdin", None
            else:
                handle = stack.enter_context(Path(path).open(encoding="utf-8", errors="replace"))
                source, reopen = path, partial(Path(path).open, "rb")
            lines, backwards = stream_oldest_first(handle, source, reopen)
            diagnoser.newest_first = backwards is not None
            if backwards is not None:
                stack.enter_context(backwards)
                newest_first = True
            diagnoser.feed_all(lines)
    diagnosis = diagnoser.result()
    if newest_first:
        diagnosis.notes.append(NEWEST_FIRST_NOTE)
    return diagnosis


def run(args: argparse.Namespace, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    try:
        diagnosis = diagnose_paths(args.logs)
    except OSError as error:
        err.write(f"sglnode diagnose: {error}\n")
        return EXIT_USAGE
    if args.json:
        out.write(json.dumps(diagnosis.to_json(), indent=2) + "\n")
    else:
        out.write(diagnosis.render() + "\n")
    return EXIT_UNKNOWN if diagnosis.cause == "unknown" else EXIT_CAUSE_FOUND
