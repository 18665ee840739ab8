"""`make test` forbids skips (SGLNODE_FORBID_SKIPS=1): a skipped test must fail the run there."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

CONFTEST = Path(__file__).with_name("conftest.py")


@pytest.mark.parametrize(("forbid", "expected_rc"), [("1", 1), ("0", 0)])
def test_a_skip_fails_only_when_skips_are_forbidden(tmp_path, forbid, expected_rc):
    shutil.copy(CONFTEST, tmp_path / "conftest.py")
    (tmp_path / "test_skipping.py").write_text(
        "import pytest\n\ndef test_needs_docker():\n    pytest.skip('no docker here')\n"
    )
    env = {**os.environ, "SGLNODE_FORBID_SKIPS": forbid}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
         "--rootdir", str(tmp_path), "-c", os.devnull],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert run.returncode == expected_rc, run.stdout
