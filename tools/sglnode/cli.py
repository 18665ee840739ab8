"""The `sglnode` command line: argument parsing and exit codes only."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from typing import NoReturn

from sglnode import __version__
from sglnode.exitcodes import EXIT_USAGE

# One module per subcommand, in the order `--help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "plan",
    "bench",
    "wait",
    "diagnose",
    "topology",
    "sim",
    "validate",
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


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
