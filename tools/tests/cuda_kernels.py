"""Test helper: find nvcc and cuobjdump; compile the fixture kernel into a .so or a .cubin per arch."""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

KERNEL_SOURCE = Path(__file__).parent / "fixtures" / "kernel_audit" / "add_one.cu"
CUDA_BIN = Path("/usr/local/cuda/bin")
# nvidia-cuda-cuobjdump (requirements/toolchain.txt) installs the binary inside the package.
PIP_CUOBJDUMP = Path(sysconfig.get_paths()["purelib"]) / "nvidia" / "cu13" / "bin" / "cuobjdump"
COMPILE_TIMEOUT_S = 120

SM_120A = "arch=compute_120a,code=sm_120a"
SM_90 = "arch=compute_90,code=sm_90"


def _find_tool(name: str, *candidates: Path) -> str | None:
    found = shutil.which(name)
    if found:
        return found
    return next((str(path) for path in candidates if path.is_file() and os.access(path, os.X_OK)), None)


NVCC = _find_tool("nvcc", CUDA_BIN / "nvcc")
CUOBJDUMP = os.environ.get("CUOBJDUMP") or _find_tool("cuobjdump", CUDA_BIN / "cuobjdump", PIP_CUOBJDUMP)
SKIP_REASON = (
    "nvcc not found (CUDA toolkit absent): cannot build test kernels"
    if NVCC is None
    else "cuobjdump not found: install nvidia-cuda-cuobjdump (requirements/toolchain.txt)"
    if CUOBJDUMP is None
    else ""
)


def compile_kernel(library: Path, *gencodes: str) -> Path:
    """Compiles the fixture kernel into `library` (a shared object) for each -gencode given."""
    command = [str(NVCC), "-shared", "-Xcompiler", "-fPIC", "-o", str(library), str(KERNEL_SOURCE)]
    for gencode in gencodes:
        command += ["-gencode", gencode]
    subprocess.run(command, check=True, capture_output=True, timeout=COMPILE_TIMEOUT_S)
    return library


def compile_cubin(cubin: Path, arch: str) -> Path:
    """Compiles the fixture kernel into a loose cubin for one real arch (sm_120a, sm_90, ...)."""
    command = [str(NVCC), "-cubin", f"-arch={arch}", "-o", str(cubin), str(KERNEL_SOURCE)]
    subprocess.run(command, check=True, capture_output=True, timeout=COMPILE_TIMEOUT_S)
    return cubin
