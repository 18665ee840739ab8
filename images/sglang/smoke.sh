#!/usr/bin/env bash
# Smoke checks for the sglang-sm120 image that need no GPU (run by the Dockerfile's audit stage):
#   1. torch is a CUDA 13 build compiled for the GPU's arch (CUDA_ARCH "X.Ya": sm_XY);
#   2. sglang, its server arguments, sgl_kernel, flashinfer and the enabled transfer backends import;
#   3. `python3 -m sglang.launch_server --help` runs.
# Which versions are installed is not checked here: the lock decides that (pip --require-hashes).
# The kernels' architectures are kernel_audit.py's job.
#
#   smoke.sh REPORT_FILE
#
# Env: CUDA_ARCH (required: the image's TORCH_CUDA_ARCH_LIST, "X.Ya" for compute capability X.Y);
# ENABLE_NIXL ENABLE_MOONCAKE ENABLE_DEEPEP (1 = installed, so check it); NO_GPU_LIB (default
# /opt/sglnode/no-gpu: a folder with a libcuda.so.1 stub for machines without a driver). Exit 0 only if
# all pass.
set -euo pipefail

report="${1:?usage: smoke.sh REPORT_FILE}"
: "${CUDA_ARCH:?CUDA_ARCH must name the arch-specific target of the GPU}"
export CUDA_ARCH
no_gpu_lib="${NO_GPU_LIB:-/opt/sglnode/no-gpu}"

# Kernel modules link libcuda.so.1, which the driver provides at run time; without one the stub that
# cuda-home.sh made satisfies the loader. Only for this script (never in the image's environment).
export LD_LIBRARY_PATH="${no_gpu_lib}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"

{
  echo "# SGLang image smoke report (no GPU: torch build, imports, launch_server --help)"
  python3 - <<'PY'
import importlib
import os

import torch

assert torch.version.cuda and torch.version.cuda.startswith("13."), f"torch CUDA {torch.version.cuda}"
# get_arch_list() needs a GPU; the compiled arch flags do not.
arch_flags = torch._C._cuda_getArchFlags()
sm = "sm_" + os.environ["CUDA_ARCH"].rstrip("af").replace(".", "")
assert sm in arch_flags, f"torch built for {arch_flags}, no {sm}"
print(f"torch    {torch.__version__} CUDA {torch.version.cuda}, archs {arch_flags}")

modules = ["sglang", "sglang.srt.server_args", "sgl_kernel", "flashinfer"]
if os.environ.get("ENABLE_NIXL") == "1":
    modules.append("nixl._api")
if os.environ.get("ENABLE_MOONCAKE") == "1":
    modules.append("mooncake.engine")
if os.environ.get("ENABLE_DEEPEP") == "1":
    modules.append("deep_ep")
for name in modules:
    importlib.import_module(name)
    print(f"import   {name}")
PY
  python3 -m sglang.launch_server --help >/dev/null
  echo "run      python3 -m sglang.launch_server --help"
} 2>&1 | tee "$report"
