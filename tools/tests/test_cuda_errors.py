"""A CUDA error gets the same diagnosis whether a library prints its text, its name, or both.

torch prints the runtime's text ("CUDA error: no kernel image is available for execution on the
device"), numba and cuda-python the name alone ("Call to cuLaunchKernel results in
CUDA_ERROR_NO_BINARY_FOR_GPU"), cupy both. The rules know the texts; cuda_errors.yaml (the runtime's
own table) lets a name read as its text. Every code of the table is printed each way here.
"""

import ctypes
import re
from pathlib import Path

import pytest
import yaml

from sglnode.diagnosis import cuda_errors
from sglnode.diagnosis.diagnose import diagnose_lines, numbered

CUDA_HOME = Path("/usr/local/cuda")
NUMBA_ERROR = "numba.cuda.cudadrv.driver.CudaAPIError:"
ROWS = yaml.safe_load(cuda_errors.TABLE.read_text(encoding="utf-8"))


def cause(line: str) -> str:
    return diagnose_lines(numbered([line])).cause


@pytest.mark.skipif(
    not (CUDA_HOME / "lib64/libcudart.so").exists(), reason="no CUDA toolkit at /usr/local/cuda"
)
def test_the_table_is_the_installed_runtimes():
    runtime = ctypes.CDLL(str(CUDA_HOME / "lib64/libcudart.so"))
    runtime.cudaGetErrorName.restype = runtime.cudaGetErrorString.restype = ctypes.c_char_p
    header = (CUDA_HOME / "include/cuda.h").read_text(encoding="utf-8")
    driver = {int(code): name for name, code in re.findall(r"\b(CUDA_ERROR_\w+)\s*=\s*(\d+)", header)}
    for row in ROWS:
        assert runtime.cudaGetErrorName(row["code"]).decode() == row["runtime"], row
        assert runtime.cudaGetErrorString(row["code"]).decode() == row["text"], row
        assert driver.get(row["code"]) == row["driver"], row
    # every code the runtime names is in the table
    named = {code for code in range(1, 1100) if b"nrecognized" not in runtime.cudaGetErrorName(code)}
    assert named == {row["code"] for row in ROWS}


@pytest.mark.parametrize("row", ROWS, ids=lambda row: row["runtime"])
def test_a_cuda_error_by_name_is_diagnosed_as_by_its_text(row):
    by_text = cause(f"RuntimeError: CUDA error: {row['text']}")
    printed = [
        f"cupy_backends.cuda.api.runtime.CUDARuntimeError: {row['runtime']}: {row['text']}",
        f"RuntimeError: {row['runtime']}",
        f"({row['runtime']}, 0)",
    ]
    if row["driver"]:
        printed += [
            f"{NUMBA_ERROR} [{row['code']}] Call to cuLaunchKernel results in {row['driver']}",
            f'Error: DriverError({row["driver"]}, "{row["text"]}")',
        ]
    assert {line: cause(line) for line in printed} == dict.fromkeys(printed, by_text)


def test_the_gloss_is_read_and_the_line_is_shown_as_written():
    line = f"{NUMBA_ERROR} [209] Call to cuLaunchKernel results in CUDA_ERROR_NO_BINARY_FOR_GPU"
    diagnosis = diagnose_lines(numbered([line]))
    assert diagnosis.cause == "arch_unsupported"
    assert [entry["text"] for entry in diagnosis.to_json()["evidence"]] == [line]
    assert (
        cuda_errors.glossed(line)
        == f"{line} (CUDA error: no kernel image is available for execution on the device)"
    )
    # a name next to its own text, and a line with no name, are left as they are
    assert (
        cuda_errors.glossed(
            "cudaErrorNoKernelImageForDevice: no kernel image is available for execution on the device"
        )
        is None
    )
    assert cuda_errors.glossed("CUDA error: an illegal memory access was encountered") is None


def test_a_host_allocation_that_prints_the_oom_code_stays_no_gpu_oom():
    # TensorFlow/JAX name the driver's code for a failed pinned host allocation
    assert cuda_errors.glossed("failed to alloc 2048 bytes on host: CUDA_ERROR_OUT_OF_MEMORY") is None
    assert cause("E1201 10:00:00 failed to alloc 2048 bytes on host: CUDA_ERROR_OUT_OF_MEMORY") != "oom"
    assert cause("jaxlib.xla_extension.XlaRuntimeError: INTERNAL: CUDA_ERROR_OUT_OF_MEMORY") == "oom"
