"""The `sglnode` command line: argument parsing and exit codes only."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from sglnode import __version__

# One module per subcommand, in the order `--help` lists them.
COMMAND_MODULES: tuple[str, ...] = ("plan",)

EXIT_USAGE = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
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
