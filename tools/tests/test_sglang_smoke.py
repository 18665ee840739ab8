"""images/sglang/smoke.sh, run in a stand-in Python environment (test fixture, no SGLang inside).

The environment is a real venv whose site-packages hold fake distributions (dist-info METADATA with
versions) and fake modules named like SGLang's, plus real nvcc-compiled kernels at the paths where
torch and sgl_kernel keep theirs. That exercises the script's version, import and SASS checks.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from cuda_kernels import CUOBJDUMP, SKIP_REASON, SM_90, SM_120A, compile_kernel

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOKE_SCRIPT = REPO_ROOT / "images" / "sglang" / "smoke.sh"
SMOKE_TIMEOUT_S = 120
EXPECTED = {  # images/sglang/Dockerfile defaults
    "SGLANG_VERSION": "0.5.23",
    "TORCH_VERSION": "2.14.1",
    "FLASHINFER_VERSION": "0.7.2",
    "SGLANG_KERNEL_VERSION": "0.4.10",
}
TORCH_INIT = """\
from types import SimpleNamespace

version = SimpleNamespace(cuda={cuda!r})


class _C:
    @staticmethod
    def _cuda_getArchFlags():
        return {arch_flags!r}
"""

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)


@pytest.fixture(scope="module")
def kernels(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out_dir = tmp_path_factory.mktemp("kernels")
    return {
        "sm120a": compile_kernel(out_dir / "sm120a.so", SM_120A),
        "sm90": compile_kernel(out_dir / "sm90.so", SM_90),
    }


def _fake_dist(site: Path, name: str, version: str) -> None:
    dist_info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    dist_info.mkdir()
    (dist_info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def _fake_module(site: Path, dotted: str) -> None:
    path = site.joinpath(*dotted.split("."))
    path.mkdir(parents=True, exist_ok=True)
    (path / "__init__.py").touch()


def _make_env(
    root: Path,
    kernels: dict[str, Path],
    *,
    torch_version: str = "2.14.1",
    torch_cuda: str = "13.0",
    arch_flags: str = "sm_90 sm_100 sm_120",
    common_ops: str = "sm120a",
    flash_attn: str | None = None,
) -> Path:
    """A venv that looks to smoke.sh like an installed image; returns its bin folder."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    site = Path(sysconfig.get_path("platlib", vars={"base": str(venv), "platbase": str(venv)}, scheme="venv"))
    versions = {
        "sglang": EXPECTED["SGLANG_VERSION"],
        "torch": torch_version,
        "flashinfer-python": EXPECTED["FLASHINFER_VERSION"],
        "sglang-kernel": EXPECTED["SGLANG_KERNEL_VERSION"],
    }
    for name, version in versions.items():
        _fake_dist(site, name, version)
    for module in ("sglang.srt.server_args", "sgl_kernel.sm100", "flashinfer", "nixl._api", "torch.lib"):
        _fake_module(site, module)
    (site / "torch" / "__init__.py").write_text(TORCH_INIT.format(cuda=torch_cuda, arch_flags=arch_flags))
    shutil.copy(kernels["sm120a"], site / "torch" / "lib" / "libtorch_cuda.so")
    shutil.copy(kernels[common_ops], site / "sgl_kernel" / "sm100" / "common_ops.abi3.so")
    if flash_attn:
        shutil.copy(kernels[flash_attn], site / "flash_attn_2_cuda.cpython-312-x86_64-linux-gnu.so")
    return venv / "bin"


def _smoke(bin_dir: Path, report: Path, **env_overrides: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        **EXPECTED,
        "ENABLE_NIXL": "1",
        "ENABLE_MOONCAKE": "0",
        "ENABLE_DEEPEP": "0",
        "CUOBJDUMP": str(CUOBJDUMP),
        "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}",
        **env_overrides,
    }
    return subprocess.run(
        ["bash", str(SMOKE_SCRIPT), str(report)],
        capture_output=True,
        text=True,
        env=env,
        timeout=SMOKE_TIMEOUT_S,
        check=False,
    )


def test_a_complete_install_passes_and_writes_the_report(tmp_path, kernels):
    report = tmp_path / "smoke-report.txt"
    result = _smoke(_make_env(tmp_path, kernels), report)
    assert result.returncode == 0, result.stdout + result.stderr
    text = report.read_text()
    assert "version  torch==2.14.1" in text
    assert "version  sglang==0.5.23" in text
    assert "import   nixl._api" in text
    assert text.count("\nok       sm_120") == 2  # libtorch_cuda and sgl_kernel's common_ops


def test_a_torch_version_other_than_the_pin_fails(tmp_path, kernels):
    result = _smoke(_make_env(tmp_path, kernels, torch_version="2.13.0"), tmp_path / "report.txt")
    assert result.returncode != 0
    assert "torch 2.13.0 installed, 2.14.1 expected" in result.stdout


def test_a_torch_built_for_cuda_12_fails(tmp_path, kernels):
    result = _smoke(_make_env(tmp_path, kernels, torch_cuda="12.8"), tmp_path / "report.txt")
    assert result.returncode != 0
    assert "torch CUDA 12.8" in result.stdout


def test_a_torch_compiled_without_sm_120_fails(tmp_path, kernels):
    result = _smoke(_make_env(tmp_path, kernels, arch_flags="sm_80 sm_90"), tmp_path / "report.txt")
    assert result.returncode != 0
    assert "no sm_120" in result.stdout


def test_sgl_kernel_without_sm_120_sass_fails(tmp_path, kernels):
    result = _smoke(_make_env(tmp_path, kernels, common_ops="sm90"), tmp_path / "report.txt")
    assert result.returncode == 1
    assert "missing  sm_120" in result.stdout
    assert "common_ops.abi3.so  (has: sm_90)" in result.stdout


def test_an_installed_flash_attn_is_checked_too(tmp_path, kernels):
    result = _smoke(_make_env(tmp_path, kernels, flash_attn="sm90"), tmp_path / "report.txt")
    assert result.returncode == 1
    assert "flash_attn_2_cuda" in result.stdout


def test_an_enabled_backend_that_does_not_import_fails(tmp_path, kernels):
    result = _smoke(_make_env(tmp_path, kernels), tmp_path / "report.txt", ENABLE_MOONCAKE="1")
    assert result.returncode != 0
    assert "mooncake" in result.stdout
