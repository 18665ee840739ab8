#!/usr/bin/env bash
# Smoke checks for the sglang-sm120 image that need no GPU (run by the Dockerfile's smoke stage):
#   1. the pinned versions are what got installed, and torch is a CUDA 13 build compiled for sm_120;
#   2. sglang, sgl_kernel, flashinfer and the enabled transfer backends import;
#   3. the compiled kernels SGLang runs on sm_120 carry sm_120 SASS (check-sm120.sh).
#
#   smoke.sh REPORT_FILE
#
# Env: SGLANG_VERSION TORCH_VERSION FLASHINFER_VERSION SGLANG_KERNEL_VERSION (expected versions),
# ENABLE_NIXL ENABLE_MOONCAKE ENABLE_DEEPEP (1 = installed, so check it). Exit 0 only if all pass.
set -euo pipefail

report="${1:?usage: smoke.sh REPORT_FILE}"
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly CUDA_STUBS=/usr/local/cuda/lib64/stubs

# Kernel modules link libcuda.so.1, which the driver provides at run time. The toolkit's stub
# satisfies the loader for an import without a GPU; it is used for this script only.
stub_dir="$(mktemp -d)"
trap 'rm -rf "$stub_dir"' EXIT
ln -s "${CUDA_STUBS}/libcuda.so" "${stub_dir}/libcuda.so.1"
export LD_LIBRARY_PATH="${stub_dir}${LD_LIBRARY_PATH:+:${LD_LIBRARY_PATH}}"

{
  echo "# sglang-sm120 smoke report (no GPU: imports, versions, SASS arches)"
  python3 - <<'PY'
import importlib
import importlib.metadata as metadata
import os

expected = {
    "sglang": os.environ["SGLANG_VERSION"],
    "torch": os.environ["TORCH_VERSION"],
    "flashinfer-python": os.environ["FLASHINFER_VERSION"],
    "sglang-kernel": os.environ["SGLANG_KERNEL_VERSION"],
}
for dist, want in expected.items():
    got = metadata.version(dist).split("+")[0]
    assert got == want, f"{dist} {got} installed, {want} expected"
    print(f"version  {dist}=={got}")

import torch

assert torch.version.cuda and torch.version.cuda.startswith("13."), f"torch CUDA {torch.version.cuda}"
# get_arch_list() needs a GPU; the compiled arch flags do not.
arch_flags = torch._C._cuda_getArchFlags()
assert "sm_120" in arch_flags, f"torch built for {arch_flags}, no sm_120"
print(f"torch    CUDA {torch.version.cuda}, archs {arch_flags}")

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

  site_packages="$(python3 -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')"
  # sgl_kernel loads sm100/ for every GPU except sm_90 (sgl_kernel/load_utils.py, 0.4.10).
  libraries=(
    "${site_packages}/torch/lib/libtorch_cuda.so"
    "${site_packages}/sgl_kernel/sm100/common_ops.abi3.so"
  )
  shopt -s nullglob
  libraries+=("${site_packages}"/flash_attn_2_cuda*.so)
  if [[ "${ENABLE_DEEPEP:-0}" == 1 ]]; then
    deep_ep_libraries=("${site_packages}"/deep_ep/*.so "${site_packages}"/deep_ep_cpp*.so)
    ((${#deep_ep_libraries[@]})) || { echo "missing  deep_ep: no compiled module found"; exit 1; }
    libraries+=("${deep_ep_libraries[@]}")
  fi
  bash "${here}/check-sm120.sh" "${libraries[@]}"
} 2>&1 | tee "$report"
