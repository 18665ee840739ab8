"""Helpers for the tests of locally built images (images/*/build.sh): run docker, build by script."""

from __future__ import annotations

import subprocess
from pathlib import Path

RUN_TIMEOUT_S = 120
# A cold build downloads wheels and apt packages on 2 cores; a warm one skips in seconds.
BUILD_TIMEOUT_S = 900


def docker(*args: str, timeout: int = RUN_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)


def build_with_script(script: Path, tag: str) -> str:
    """Run an image's build.sh (it skips a present tag) and return the tag it must have produced."""
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return tag
