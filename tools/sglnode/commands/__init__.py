"""Subcommands of the `sglnode` CLI.

Each module exposes `register(subparsers)`: it adds its parser and sets `func`, a callable
taking the parsed namespace and returning the process exit code.
"""
