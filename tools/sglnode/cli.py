"""The `sglnode` command line: argument parsing and exit codes only."""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence
from typing import NoReturn

from sglnode import __version__
from sglnode.exitcodes import EXIT_OK, EXIT_USAGE

# One module per subcommand, in the order `--help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "plan",
    "bench",
    "wait",
    "diagnose",
    "topology",
    "sim",
    "validate",
    "state",
    "upstream",
    "tune",
)


class UsageParser(argparse.ArgumentParser):
    """argparse with sglnode's usage exit code (64), leaving 2 to `sglnode wait`'s "crashed"."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    parser = UsageParser(
        prog="sglnode",
        description="Validate an SGLang rollout: topology, readiness, diagnosis, memory plan, benchmark.",
    )
    parser.add_argument("--version", action="version", version=f"sglnode {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        importlib.import_module(f"sglnode.commands.{name}").register(subparsers)
    return parser


# The shell's convention for a process ended by SIGINT (128 + 2).
EXIT_INTERRUPTED = 130


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return int(args.func(args))
    except BrokenPipeError:
        # The reader went away (`sglnode status | head`): not an error of ours, and no traceback.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:
        # Commands with children or partial results handle SIGINT themselves; this is the backstop.
        print(f"sglnode {args.command}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
