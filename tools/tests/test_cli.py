import argparse
import subprocess
import sys

import pytest

from sglnode import __version__
from sglnode.cli import COMMAND_MODULES, build_parser, main
from sglnode.exitcodes import EXIT_USAGE


def test_no_command_prints_help_and_exits_with_usage_code(capsys):
    assert main([]) == EXIT_USAGE
    assert "usage: sglnode" in capsys.readouterr().err


def test_unknown_command_is_rejected():
    with pytest.raises(SystemExit) as excinfo:
        main(["no-such-command"])
    assert excinfo.value.code == EXIT_USAGE


def test_a_bad_option_of_a_subcommand_is_a_usage_error_not_a_crash_code():
    # 2 means "crashed" for `sglnode wait`: argparse's own default must not leak through.
    with pytest.raises(SystemExit) as excinfo:
        main(["wait", "--no-such-option"])
    assert excinfo.value.code == EXIT_USAGE != 2


def _leaf_parsers(parser):
    """The parsers a command line can end in: a command, or each action of a nested command."""
    nested = [action for action in parser._actions if isinstance(action, argparse._SubParsersAction)]
    if not nested:
        return [parser]
    return [leaf for sub in nested[0].choices.values() for leaf in _leaf_parsers(sub)]


@pytest.mark.parametrize("name", COMMAND_MODULES)
def test_every_registered_command_has_help_and_a_handler(name, capsys):
    parser = build_parser()
    choices = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
    for leaf in _leaf_parsers(choices[name]):
        assert callable(leaf.get_default("func")), leaf.prog
    with pytest.raises(SystemExit) as excinfo:
        main([name, "--help"])
    assert excinfo.value.code == 0
    assert f"sglnode {name}" in capsys.readouterr().out


def test_module_entry_point_reports_version():
    out = subprocess.run(
        [sys.executable, "-m", "sglnode", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"sglnode {__version__}"
