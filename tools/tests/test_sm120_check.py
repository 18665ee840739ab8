"""images/sglang/check-sm120.sh against real nvcc output: sm_120 SASS passes, anything else fails."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from cuda_kernels import CUOBJDUMP, SKIP_REASON, SM_90, SM_120A, compile_kernel

REPO_ROOT = Path(__file__).resolve().parents[2]
CHECKER = REPO_ROOT / "images" / "sglang" / "check-sm120.sh"
CHECK_TIMEOUT_S = 60

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)


@pytest.fixture(scope="module")
def libraries(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out_dir = tmp_path_factory.mktemp("sm120")
    return {
        "sm120a": compile_kernel(out_dir / "sm120a.so", SM_120A),
        "sm90": compile_kernel(out_dir / "sm90.so", SM_90),
        # Hopper SASS plus Blackwell SASS in one fat binary, as most wheels ship.
        "fat": compile_kernel(out_dir / "fat.so", SM_90, "arch=compute_120,code=sm_120"),
        # PTX for 12.0 but no SASS: would JIT at first launch, so it must not pass.
        "ptx_only": compile_kernel(out_dir / "ptx_only.so", "arch=compute_120,code=compute_120"),
    }


def _check(*args: str | Path, cuobjdump: str | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CUOBJDUMP": cuobjdump if cuobjdump is not None else str(CUOBJDUMP)}
    return subprocess.run(
        ["bash", str(CHECKER), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=CHECK_TIMEOUT_S,
        check=False,
    )


def test_accepts_a_library_compiled_for_sm_120a(libraries):
    result = _check(libraries["sm120a"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.startswith("ok")
    assert "sm_120a" in result.stdout


def test_rejects_a_library_compiled_only_for_sm_90(libraries):
    result = _check(libraries["sm90"])
    assert result.returncode == 1
    assert result.stdout.startswith("missing")
    assert "has: sm_90" in result.stdout


def test_accepts_a_fat_binary_that_also_holds_sm_120(libraries):
    result = _check(libraries["fat"])
    assert result.returncode == 0, result.stdout
    assert "sm_90" in result.stdout
    assert "sm_120" in result.stdout


def test_rejects_ptx_without_sass(libraries):
    result = _check(libraries["ptx_only"])
    assert result.returncode == 1
    assert "no SASS" in result.stdout


def test_one_bad_library_fails_the_whole_check_and_each_gets_a_line(libraries):
    result = _check(libraries["sm120a"], libraries["sm90"])
    assert result.returncode == 1
    lines = result.stdout.splitlines()
    assert [line.split()[0] for line in lines] == ["ok", "missing"]
    assert lines[1].endswith("(has: sm_90)")


def test_arch_option_selects_another_target(libraries):
    assert _check("--arch", "90", libraries["sm90"]).returncode == 0
    assert _check("--arch", "90", libraries["sm120a"]).returncode == 1


def test_absent_file_and_file_without_device_code_fail(tmp_path):
    host_only = tmp_path / "host_only.so"
    host_only.write_bytes(b"\x7fELF not really a library")
    result = _check(tmp_path / "absent.so", host_only)
    assert result.returncode == 1
    assert "no such file" in result.stdout
    assert "no SASS" in result.stdout


def test_usage_errors_exit_2(libraries):
    assert _check().returncode == 2
    assert _check("--arch", "twelve", libraries["sm120a"]).returncode == 2
    missing_tool = _check(libraries["sm120a"], cuobjdump="/nonexistent/cuobjdump")
    assert missing_tool.returncode == 2
    assert "cuobjdump not found" in missing_tool.stderr
