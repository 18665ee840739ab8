import subprocess
import sys

import pytest

from sglnode import __version__
from sglnode.cli import COMMAND_MODULES, build_parser, main


def test_no_command_prints_help_and_exits_with_usage_code(capsys):
    assert main([]) == 2
    assert "usage: sglnode" in capsys.readouterr().err


def test_unknown_command_is_rejected():
    with pytest.raises(SystemExit) as excinfo:
        main(["no-such-command"])
    assert excinfo.value.code == 2


def test_every_registered_command_has_a_handler():
    parser = build_parser()
    for name in COMMAND_MODULES:
        sub = parser._subparsers._group_actions[0].choices  # type: ignore[union-attr]
        assert any(callable(p.get_default("func")) for p in sub.values()), name


def test_module_entry_point_reports_version():
    out = subprocess.run(
        [sys.executable, "-m", "sglnode", "--version"], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == f"sglnode {__version__}"
