"""SGLang's own fused-MoE Triton config lookup, run inside the SGLang image (python3 moe_probe.py).

Reads {"device_name": str | null, "cases": [{"id", "E", "N", "dtype", "block_shape", "per_channel_quant"}]}
on stdin and prints JSON: SGLang's and Triton's versions, the config root, every config file shipped
for the device name, and per case the file name SGLang looks for and which file its lookup used:
  exact     configs/triton_<this Triton>/<file> (SGLang logs "Using MoE kernel config from ...")
  fallback  the same file name under another Triton version's directory (SGLang warns "Fallback to
            triton version ...")
  default   nothing found: SGLang's get_default_config heuristics ("Using default MoE kernel config")
The `_down` (down-projection, TMA path) lookup is reported the same way, plus `reuses_up`.

Without a GPU (CI, the build host) the device name is patched into torch.cuda, as the node double of
tools/oracle does: nothing in SGLang is patched. Run with LD_LIBRARY_PATH=/opt/sglnode/no-gpu so
sgl_kernel imports against the image's stub libcuda.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from types import SimpleNamespace

import torch
import triton

LOOKUP_MODULE = "sglang.srt.layers.moe.moe_runner.triton_utils.fused_moe_triton_config"
# The node's GPU (sm_120): shared memory per block opt-in (99 KiB), as torch.cuda reports it there.
# Its name, compute capability and memory come with the request (tools/sglnode/pins.yaml's preset).
SM120_SMEM_OPTIN = 101376


def patch_device(name: str, capability: tuple[int, int], memory_mib: int) -> None:
    if torch.cuda.is_available():
        return  # a real GPU answers for itself
    props = SimpleNamespace(
        name=name,
        major=capability[0],
        minor=capability[1],
        shared_memory_per_block_optin=SM120_SMEM_OPTIN,
        multi_processor_count=188,
        total_memory=memory_mib << 20,
    )
    torch.cuda.is_available = lambda: True
    torch.cuda.device_count = lambda: 1
    torch.cuda.current_device = lambda: 0
    torch.cuda.get_device_name = lambda device=None: name
    torch.cuda.get_device_capability = lambda device=None: capability
    torch.cuda.get_device_properties = lambda device=None: props


def publish_defaults() -> None:
    """get_moe_configs reads the runtime context (deterministic inference): publish a default one."""
    # sglang is imported only after patch_device: it reads the device at import time.
    from sglang.srt.runtime_context import publish, reset_context  # noqa: PLC0415
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415

    reset_context()
    publish(ServerArgs(model_path="dummy", device="cpu"), role="tokenizer")


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def classify(messages: list[str], triton_version: str) -> dict[str, object]:
    for message in messages:
        if message.startswith("Using MoE kernel config from "):
            path = message.removeprefix("Using MoE kernel config from ").rstrip(".")
            return {"class": "exact", "path": path, "triton": triton_version}
        if "Fallback to triton version" in message:
            version = message.split("Fallback to triton version ", 1)[1].split(" ", 1)[0]
            path = message.split("use MoE kernel config from ", 1)[1].split(". Performance", 1)[0]
            return {"class": "fallback", "path": path, "triton": version}
        if message.startswith("Down MoE config file not found"):
            return {"class": "reuses_up", "path": None, "triton": None}
        if message.startswith("Using default MoE kernel config"):
            return {"class": "default", "path": None, "triton": None}
    return {"class": "unknown", "path": None, "triton": None, "messages": messages}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args()
    request = json.load(sys.stdin)
    device_name = request.get("device_name")
    if device_name:
        major, minor = (int(part) for part in request["capability"].split("."))
        patch_device(device_name, (major, minor), int(request["memory_mib"]))

    import sglang  # noqa: PLC0415
    from sglang.srt.layers.moe.moe_runner.triton_utils import (  # noqa: PLC0415
        fused_moe_triton_config as lookup,
    )
    from sglang.srt.utils import get_device_name  # noqa: PLC0415

    publish_defaults()
    capture = Capture()
    logger = logging.getLogger(LOOKUP_MODULE)
    logger.addHandler(capture)
    logger.setLevel(logging.DEBUG)
    root = os.environ.get("SGLANG_MOE_CONFIG_DIR", os.path.dirname(os.path.realpath(lookup.__file__)))
    device_file = get_device_name().replace(" ", "_")
    shipped = sorted(
        f"{version}/{name}"
        for version in os.listdir(os.path.join(root, "configs"))
        if version.startswith("triton_")
        for name in os.listdir(os.path.join(root, "configs", version))
        if f"device_name={device_file}" in name
    )
    results = []
    for case in request["cases"]:
        block = case.get("block_shape") or [0, 0]
        args = (case["E"], case["N"], case.get("dtype"))
        name = lookup.get_config_file_name(*args, block, bool(case.get("per_channel_quant")))
        found = {}
        for kind, down in (("up", False), ("down", True)):
            capture.messages.clear()
            configs = lookup.get_moe_configs(
                *args,
                block[0],
                block[1],
                per_channel_quant=bool(case.get("per_channel_quant")),
                down_moe=down,
            )
            found[kind] = {
                **classify(capture.messages, triton.__version__),
                # The batch sizes (M) the file was tuned at: how many, and the range.
                "batch_sizes": len(configs or {}),
                "m_range": [min(configs), max(configs)] if configs else None,
            }
        results.append({"id": case["id"], "file_name": name, **found})
    json.dump(
        {
            "sglang": sglang.__version__,
            "triton": triton.__version__,
            "config_root": root,
            "config_dir_env": os.environ.get("SGLANG_MOE_CONFIG_DIR"),
            "device_name": get_device_name(),
            "shipped_for_device": shipped,
            "cases": results,
        },
        sys.stdout,
        indent=1,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
