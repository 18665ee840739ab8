"""A test double of this node's GPUs for running SGLang's own code where there is no GPU.

SGLang reads the device in three places that decide its memory arithmetic and kernel choices:
`nvidia-smi --query-gpu=memory.total` (srt/utils/common.py get_nvgpu_memory_capacity, in MiB),
torch.cuda's device queries (compute capability, name, properties), and libcuda.so.1, which
sgl_kernel's extension links against. `install()` answers all three with the node's values:
a fake `nvidia-smi` first on PATH, torch.cuda functions that report the GPU, and (from the caller)
a stub libcuda on LD_LIBRARY_PATH. Nothing in SGLang itself is patched.

Values: the node's GPU as its hardware preset (named by tools/sglnode/pins.yaml) has it, passed in by
the caller as SGLNODE_GPU_NAME, SGLNODE_GPU_CAPABILITY ("major.minor"), SGLNODE_GPU_MIB (as nvidia-smi
reports it) and SGLNODE_GPU_COUNT (sglnode.pins.gpu_env()); 188 SMs. Other GPU sizes are set per case
with SGLNODE_ORACLE_GPU_MIB.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from types import SimpleNamespace

GPU_NAME = os.environ.get("SGLNODE_GPU_NAME", "")
GPU_MIB = int(os.environ.get("SGLNODE_GPU_MIB", "0"))
CAPABILITY = tuple(int(part) for part in os.environ.get("SGLNODE_GPU_CAPABILITY", "0.0").split("."))
SM_COUNT = 188
GPU_COUNT = int(os.environ.get("SGLNODE_GPU_COUNT", "0"))
GPU_MIB_ENV = "SGLNODE_ORACLE_GPU_MIB"
FAKE_NVIDIA_SMI = """#!/bin/sh
# Test double of nvidia-smi for sglnode's oracle: memory.total (MiB) of each GPU of the node.
for i in $(seq 1 {count}); do echo "${{{env}:-{mib}}}"; done
"""


def gpu_mib() -> int:
    return int(os.environ.get(GPU_MIB_ENV, GPU_MIB))


def set_gpu_mib(mib: int) -> None:
    os.environ[GPU_MIB_ENV] = str(mib)


def _require_facts() -> None:
    if not GPU_NAME or not GPU_MIB or not GPU_COUNT or CAPABILITY == (0, 0):
        raise SystemExit("node_double: set SGLNODE_GPU_NAME/_CAPABILITY/_MIB/_COUNT (sglnode.pins.gpu_env())")


def _install_nvidia_smi() -> None:
    directory = Path(tempfile.mkdtemp(prefix="sglnode-node-double-"))
    script = directory / "nvidia-smi"
    script.write_text(FAKE_NVIDIA_SMI.format(count=GPU_COUNT, env=GPU_MIB_ENV, mib=GPU_MIB))
    script.chmod(script.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    os.environ["PATH"] = f"{directory}{os.pathsep}{os.environ.get('PATH', '')}"


def _install_torch_cuda() -> None:
    import torch

    def properties(device: object = None) -> SimpleNamespace:
        return SimpleNamespace(
            name=GPU_NAME,
            major=CAPABILITY[0],
            minor=CAPABILITY[1],
            total_memory=gpu_mib() << 20,
            multi_processor_count=SM_COUNT,
            L2_cache_size=128 << 20,
            uuid="GPU-00000000-0000-0000-0000-sglnodedouble",
            gcnArchName="",
        )

    cuda = torch.cuda
    cuda.is_available = lambda: True
    cuda.device_count = lambda: GPU_COUNT
    cuda.current_device = lambda: 0
    cuda.set_device = lambda device: None
    cuda.get_device_capability = lambda device=None: CAPABILITY
    cuda.get_device_name = lambda device=None: GPU_NAME
    cuda.get_device_properties = properties
    cuda.mem_get_info = lambda device=None: (gpu_mib() << 20, gpu_mib() << 20)


def install() -> None:
    """Make this process see the node's GPUs (call before importing sglang)."""
    _require_facts()
    _install_nvidia_smi()
    _install_torch_cuda()
