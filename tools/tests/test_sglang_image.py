"""The real sglang-sm120 image, built by tools/setup/sglang-image.sh (make image; make test runs that
stage before pytest, and the fixture below calls the same script, which skips an existing tag).

Checks what the issue asks of the image without a GPU: launch_server --help runs, the kernel audit
in the image tells the truth about sm_120, the JIT toolchain under CUDA_HOME builds sm_120a kernels
(torch's cpp_extension and flashinfer's link line), the JIT caches point at one volume, and the tag
follows the inputs (a second build does nothing)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from image_build import docker

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "tools" / "setup" / "sglang-image.sh"
TAG_FILE = REPO_ROOT / ".cache" / "sglang-image.tag"
# A cold build downloads ~5 GB of wheels and unpacks ~11 GB on 2 cores; with its tag present, seconds.
COLD_BUILD_TIMEOUT_S = 2400
SKIP_BUILD_TIMEOUT_S = 120
JIT_TIMEOUT_S = 600
SGLANG_UID = "10002"  # images/sglang/Dockerfile ARG SGLANG_UID
JIT_CACHE = "/var/cache/sglang-jit"
NO_GPU_ENV = "LD_LIBRARY_PATH=/opt/sglnode/no-gpu"  # the documented env for imports without a driver

pytestmark = [
    pytest.mark.docker,
    pytest.mark.sglang_image,
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("docker") is None, reason="docker CLI not found"),
]


def _build() -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=COLD_BUILD_TIMEOUT_S, check=False
    )


@pytest.fixture(scope="module")
def image() -> str:
    result = _build()
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-4000:]
    return TAG_FILE.read_text().strip()


@pytest.fixture(scope="module")
def audit(image) -> dict:
    result = docker("run", "--rm", image, "cat", "/opt/sglnode/kernel-audit.json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def _library(audit: dict, package: str, path: str) -> dict:
    return next(lib for lib in audit["packages"][package]["libraries"] if lib["path"] == path)


def test_a_second_build_with_the_same_inputs_builds_nothing(image):
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=SKIP_BUILD_TIMEOUT_S, check=False
    )
    assert result.returncode == 0, result.stderr
    assert f"{image} exists: inputs unchanged, nothing to build" in result.stderr
    printed = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-tag"], capture_output=True, text=True, timeout=60, check=True
    )
    assert printed.stdout.strip() == image


def test_an_enable_switch_gives_another_tag(image):
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "--print-tag"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={**os.environ, "SGLANG_IMAGE_BUILD_ARGS": "ENABLE_MOONCAKE=1"},
    )
    assert result.stdout.strip() != image
    assert result.stdout.startswith("sglang-sm120:0.5.23-cu130-torch2.14.1-")


def test_launch_server_help_runs(image):
    result = docker("run", "--rm", image, "python3", "-m", "sglang.launch_server", "--help")
    assert result.returncode == 0, result.stderr[-2000:]
    assert "--model-path" in result.stdout
    assert "--disaggregation-transfer-backend" in result.stdout


def test_labels_name_the_arch_and_the_inputs(image):
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", image).stdout)
    assert labels["io.sglnode.cuda-arch"] == "12.0a"
    assert labels["io.sglnode.sglang.version"] == "0.5.23"
    assert labels["io.sglnode.torch.version"] == "2.14.1"
    assert image.endswith(labels["io.sglnode.inputs-digest"][:12])
    assert labels["org.opencontainers.image.base.name"] == "sglnode/debian:bookworm"


def test_audit_says_which_packages_carry_sm_120(audit):
    assert audit["schema"] == 1 and audit["target_sm"] == 120 and audit["ok"] is True
    torch = _library(audit, "torch", "torch/lib/libtorch_cuda.so")
    assert {"sm_120", "sm_120a"} <= set(torch["sass"]) and torch["target"] == "sass"
    common_ops = _library(audit, "sglang-kernel", "sgl_kernel/sm100/common_ops.abi3.so")
    assert "sm_120a" in common_ops["sass"] and common_ops["target"] == "sass"
    # FA3 and FlashMLA: Hopper / datacenter-Blackwell kernels only, no PTX to fall back on.
    flash_ops = _library(audit, "sglang-kernel", "sgl_kernel/flash_ops.abi3.so")
    assert flash_ops["sass"] == ["sm_80", "sm_86", "sm_90a"] and flash_ops["ptx"] == []
    assert flash_ops["target"] == "none"
    flashmla = _library(audit, "sglang-kernel", "sgl_kernel/flashmla_ops.abi3.so")
    assert not any(arch.startswith("sm_12") for arch in flashmla["sass"]) and flashmla["target"] == "none"
    deep_ep = audit["packages"]["sgl-deep-ep"]
    assert deep_ep["sass"] == ["sm_90", "sm_100", "sm_103"] and deep_ep["target"]["none"] == deep_ep["files"]
    assert audit["packages"]["sgl-flash-mla"]["target"]["sass"] == 0


def test_audit_checks_the_required_entries_and_the_jit_toolchains(audit):
    assert {entry["name"]: entry["ok"] for entry in audit["required"]} == {
        entry["name"]: True for entry in audit["required"]
    }
    assert audit["toolchains"]["nvcc"]["accepts"] is True
    assert audit["toolchains"]["triton-ptxas"]["accepts"] is True
    assert audit["jit_packages"]["flashinfer-cubin"]["installed"] is False
    assert audit["jit_packages"]["flashinfer-python"]["version"] == "0.7.2"


def test_sglang_and_torch_import_without_a_gpu(image):
    plain = docker("run", "--rm", image, "python3", "-c", "import torch, sglang.srt.server_args; print('ok')")
    assert plain.returncode == 0 and plain.stdout.strip() == "ok", plain.stderr[-2000:]
    kernels = docker(
        "run", "--rm", "-e", NO_GPU_ENV, image, "python3", "-c", "import sgl_kernel, flashinfer; print('ok')"
    )
    assert kernels.returncode == 0 and kernels.stdout.strip() == "ok", kernels.stderr[-2000:]


def test_runs_as_a_non_root_user_with_the_jit_caches_on_one_writable_volume(image):
    script = (
        "id -u; for v in TRITON_CACHE_DIR FLASHINFER_WORKSPACE_BASE TORCHINDUCTOR_CACHE_DIR XDG_CACHE_HOME; "
        'do echo "${!v}"; done; touch "$SGLNODE_JIT_CACHE/probe" && echo writable'
    )
    result = docker("run", "--rm", image, "bash", "-c", script)
    lines = result.stdout.split()
    assert lines[0] == SGLANG_UID
    assert all(path.startswith(JIT_CACHE) for path in lines[1:5])
    assert lines[-1] == "writable"


def test_nvcc_builds_with_flashinfers_link_line(image, tmp_path):
    """flashinfer's JIT: nvcc from $CUDA_HOME, its headers (cuda.h, CCCL), -L$CUDA_HOME/lib64
    -L$CUDA_HOME/lib64/stubs -lcudart -lcuda (flashinfer/jit/cpp_ext.py)."""
    (tmp_path / "probe.cu").write_text(
        "#include <cuda.h>\n#include <cub/cub.cuh>\n"
        "__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\n"
        'extern "C" int probe() { int v = 0; cuDriverGetVersion(&v); k<<<1, 32>>>(nullptr); return v; }\n'
    )
    tmp_path.chmod(0o777)
    command = (
        "cd /work && nvcc -shared -Xcompiler -fPIC -gencode=arch=compute_120a,code=sm_120a "
        "probe.cu -o probe.so "
        '-L"$CUDA_HOME/lib64" -L"$CUDA_HOME/lib64/stubs" -lcudart -lcuda && cuobjdump --list-elf probe.so'
    )
    result = docker(
        "run", "--rm", "-v", f"{tmp_path}:/work", image, "bash", "-c", command, timeout=JIT_TIMEOUT_S
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "sm_120a.cubin" in result.stdout


def test_torch_cpp_extension_jit_builds_an_sm_120a_kernel(image, tmp_path):
    """torch.utils.cpp_extension, as SGLang's and DeepEP's JIT paths use it: CUDA_HOME, nvcc, g++,
    Python headers and TORCH_CUDA_ARCH_LIST=12.0a; loaded against the no-GPU libcuda stub."""
    (tmp_path / "jit.py").write_text(
        "from torch.utils.cpp_extension import load_inline\n"
        "cuda = '__global__ void k(float *x) { x[threadIdx.x] += 1.0f; }\\n'"
        " 'void run(torch::Tensor x) { k<<<1, 32>>>(x.data_ptr<float>()); }'\n"
        "module = load_inline('sglnode_jit_probe', cpp_sources='void run(torch::Tensor x);',"
        " cuda_sources=cuda, functions=['run'])\n"
        "print(module.__file__)\n"
    )
    tmp_path.chmod(0o755)  # the image's user (uid 10002) reads it
    command = "python3 /work/jit.py 2>/dev/null | tail -1 | xargs cuobjdump --list-elf"
    result = docker(
        "run",
        "--rm",
        "-e",
        NO_GPU_ENV,
        "-v",
        f"{tmp_path}:/work:ro",
        image,
        "bash",
        "-c",
        command,
        timeout=JIT_TIMEOUT_S,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "sm_120a.cubin" in result.stdout
