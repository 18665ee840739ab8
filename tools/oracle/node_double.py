"""A test double of this node's GPUs for running SGLang's own code where there is no GPU.

SGLang reads the device in three places that decide its memory arithmetic and kernel choices:
`nvidia-smi --query-gpu=memory.total` (srt/utils/common.py get_nvgpu_memory_capacity, in MiB),
torch.cuda's device queries (compute capability, name, properties), and libcuda.so.1, which
sgl_kernel's extension links against. `install()` answers all three with the node's values:
a fake `nvidia-smi` first on PATH, torch.cuda functions that report the GPU, and (from the caller)
a stub libcuda on LD_LIBRARY_PATH. Nothing in SGLang itself is patched.

Values (RTX PRO 6000 Blackwell Server Edition): compute capability 12.0, 97887 MiB as nvidia-smi
reports it, 188 SMs. Other GPU sizes are set per case with SGLNODE_ORACLE_GPU_MIB.
"""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path
from types import SimpleNamespace

GPU_NAME = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
GPU_MIB = 97887
CAPABILITY = (12, 0)
SM_COUNT = 188
GPU_COUNT = 8
GPU_MIB_ENV = "SGLNODE_ORACLE_GPU_MIB"
FAKE_NVIDIA_SMI = """#!/bin/sh
# Test double of nvidia-smi for sglnode's oracle: memory.total (MiB) of each GPU of the node.
for i in $(seq 1 {count}); do echo "${{{env}:-{mib}}}"; done
"""


def gpu_mib() -> int:
    return int(os.environ.get(GPU_MIB_ENV, GPU_MIB))


def set_gpu_mib(mib: int) -> None:
    os.environ[GPU_MIB_ENV] = str(mib)


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
    _install_nvidia_smi()
    _install_torch_cuda()
