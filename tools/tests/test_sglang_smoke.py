"""images/sglang/smoke.sh, run in a stand-in Python environment (test fixture, no SGLang inside).

The environment is a real venv whose site-packages hold fake modules named like SGLang's: a torch
that reports a CUDA version and compiled arch flags, and an `sglang.launch_server` that answers
--help. That exercises the script's torch, import and launch checks; the real image runs it in its
audit stage (tools/tests/test_sglang_image.py checks the report it left there).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

from sglnode.pins import PINS

REPO_ROOT = Path(__file__).resolve().parents[2]
SMOKE_SCRIPT = REPO_ROOT / "images" / "sglang" / "smoke.sh"
SMOKE_TIMEOUT_S = 120
TORCH_INIT = """\
from types import SimpleNamespace

__version__ = {torch_version!r}
version = SimpleNamespace(cuda={cuda!r})


class _C:
    @staticmethod
    def _cuda_getArchFlags():
        return {arch_flags!r}
"""
LAUNCH_SERVER = """\
import sys

if sys.argv[1:] != ["--help"]:
    sys.exit("stand-in launch_server: only --help")
print("usage: launch_server [--model-path MODEL_PATH] ... (test fixture)")
"""


def _fake_module(site: Path, dotted: str) -> None:
    path = site.joinpath(*dotted.split("."))
    path.mkdir(parents=True, exist_ok=True)
    (path / "__init__.py").touch()


TORCH_VERSION = f"{PINS.torch}+{PINS.cuda_tag}"


def _make_env(
    root: Path, *, torch_cuda: str = PINS.cuda, arch_flags: str = f"sm_90 sm_100 {PINS.gpu.sm}"
) -> Path:
    """A venv that looks to smoke.sh like an installed image; returns its bin folder."""
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    site = Path(sysconfig.get_path("platlib", vars={"base": str(venv), "platbase": str(venv)}, scheme="venv"))
    for module in ("sglang.srt.server_args", "sgl_kernel", "flashinfer", "nixl._api", "torch"):
        _fake_module(site, module)
    (site / "torch" / "__init__.py").write_text(
        TORCH_INIT.format(cuda=torch_cuda, arch_flags=arch_flags, torch_version=TORCH_VERSION)
    )
    (site / "sglang" / "launch_server.py").write_text(LAUNCH_SERVER)
    return venv / "bin"


def _smoke(bin_dir: Path, report: Path, **env_overrides: str) -> subprocess.CompletedProcess[str]:
    env = {
        **os.environ,
        "ENABLE_NIXL": "1",
        "ENABLE_MOONCAKE": "0",
        "ENABLE_DEEPEP": "0",
        "NO_GPU_LIB": str(bin_dir),
        "CUDA_ARCH": PINS.gpu.cuda_arch,  # the Dockerfile passes its TORCH_CUDA_ARCH_LIST
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


def test_a_complete_install_passes_and_writes_the_report(tmp_path):
    report = tmp_path / "smoke-report.txt"
    result = _smoke(_make_env(tmp_path), report)
    assert result.returncode == 0, result.stdout + result.stderr
    text = report.read_text()
    assert f"torch    {TORCH_VERSION} CUDA {PINS.cuda}" in text
    assert "import   sglang.srt.server_args" in text
    assert "import   nixl._api" in text
    assert text.rstrip().endswith("run      python3 -m sglang.launch_server --help")


def test_a_torch_built_for_cuda_12_fails(tmp_path):
    result = _smoke(_make_env(tmp_path, torch_cuda="12.8"), tmp_path / "report.txt")
    assert result.returncode != 0
    assert "torch CUDA 12.8" in result.stdout


def test_a_torch_compiled_without_the_gpus_arch_fails(tmp_path):
    result = _smoke(_make_env(tmp_path, arch_flags="sm_80 sm_90"), tmp_path / "report.txt")
    assert result.returncode != 0
    assert f"no {PINS.gpu.sm}" in result.stdout


def test_smoke_needs_the_cuda_arch(tmp_path):
    env = {key: value for key, value in os.environ.items() if key != "CUDA_ARCH"}
    result = subprocess.run(
        ["bash", str(SMOKE_SCRIPT), str(tmp_path / "report.txt")],
        capture_output=True,
        text=True,
        env=env,
        timeout=SMOKE_TIMEOUT_S,
        check=False,
    )
    assert result.returncode != 0 and "CUDA_ARCH" in result.stderr


def test_an_enabled_backend_that_does_not_import_fails(tmp_path):
    result = _smoke(_make_env(tmp_path), tmp_path / "report.txt", ENABLE_MOONCAKE="1")
    assert result.returncode != 0
    assert "mooncake" in result.stdout


def test_a_launch_server_that_fails_fails_the_smoke(tmp_path):
    bin_dir = _make_env(tmp_path)
    site = next(bin_dir.parent.glob("lib/python3*/site-packages"))
    (site / "sglang" / "launch_server.py").write_text("raise SystemExit('broken')\n")
    result = _smoke(bin_dir, tmp_path / "report.txt")
    assert result.returncode != 0
    assert "broken" in result.stdout
