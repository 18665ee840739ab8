"""The the pinned SGLang launch flags (sglang_flags.yaml) and the router's choices, as a lookup."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglnode.topology.safeyaml import load_yaml_file

FLAGS_FILE = Path(__file__).resolve().parent / "sglang_flags.yaml"
NCCL_FILE = Path(__file__).resolve().parent / "nccl.yaml"

# `python -m sglang_router.launch_router --help` of the pinned sglang-router (--policy choices).
ROUTER_POLICIES = ("random", "round_robin", "cache_aware", "power_of_two", "manual")


@dataclass(frozen=True)
class FlagInfo:
    name: str
    takes_value: bool
    choices: tuple[str, ...]
    deprecated: str | None


@dataclass(frozen=True)
class FlagCatalog:
    version: str
    flags: dict[str, FlagInfo]  # every spelling (aliases too) -> the canonical flag's info
    removed: dict[str, dict[str, str]]  # flag -> {replacement, why}
    speculative_algorithms: tuple[str, ...]
    defaults: dict[
        str, Any
    ]  # ServerArgs defaults this repo relies on (checked in the image by the oracle test)

    def lookup(self, flag: str) -> FlagInfo | None:
        return self.flags.get(normalize_flag(flag))

    def choices(self, flag: str) -> tuple[str, ...]:
        info = self.lookup(flag)
        return info.choices if info else ()


def normalize_flag(flag: str) -> str:
    """`cuda_graph_max_bs_decode` or `--cuda-graph-max-bs-decode` -> `--cuda-graph-max-bs-decode`."""
    return "--" + flag.lstrip("-").replace("_", "-")


@functools.cache
def load_catalog(path: Path = FLAGS_FILE) -> FlagCatalog:
    data: dict[str, Any] = load_yaml_file(path, what="flag catalogue")
    flags: dict[str, FlagInfo] = {}
    for name, spec in data["flags"].items():
        info = FlagInfo(
            name=name,
            takes_value=bool(spec.get("value", True)),
            choices=tuple(str(c) for c in spec.get("choices") or ()),
            deprecated=spec.get("deprecated"),
        )
        for spelling in (name, *spec.get("aliases", ())):
            flags[spelling] = info
    return FlagCatalog(
        version=str(data["sglang_version"]),
        flags=flags,
        removed=dict(data.get("removed") or {}),
        speculative_algorithms=tuple(data.get("speculative_algorithms") or ()),
        defaults=dict(data.get("defaults") or {}),
    )


@functools.cache
def load_nccl_defaults(path: Path = NCCL_FILE) -> dict[str, Any]:
    data: dict[str, Any] = load_yaml_file(path, what="NCCL settings")
    return data


# Flags the renderer sets from topology fields; setting them again in `args` is refused so a value
# cannot silently disagree with the field the validator checked.
FIELD_FLAGS: dict[str, str] = {
    "model.path": "--model-path",
    "model.served_name": "--served-model-name",
    "model.quantization": "--quantization",
    "tp": "--tp-size",
    "dp": "--dp-size",
    "ep": "--ep-size",
    "port": "--port",
    "(rendered)": "--host",
    "role": "--disaggregation-mode",
    "bootstrap_port": "--disaggregation-bootstrap-port",
    "transfer_backend": "--disaggregation-transfer-backend",
    "mem_fraction_static": "--mem-fraction-static",
    "attention_backend": "--attention-backend",
    "kv_cache_dtype": "--kv-cache-dtype",
    "context_length": "--context-length",
    "chunked_prefill_size": "--chunked-prefill-size",
    "cuda_graph_max_bs_decode": "--cuda-graph-max-bs-decode",
    "num_continuous_decode_steps": "--num-continuous-decode-steps",
    "speculative.algorithm": "--speculative-algorithm",
    "speculative.num_steps": "--speculative-num-steps",
    "speculative.eagle_topk": "--speculative-eagle-topk",
    "speculative.num_draft_tokens": "--speculative-num-draft-tokens",
    "speculative.draft_model_path": "--speculative-draft-model-path",
    "nodes (dist-init)": "--dist-init-addr",
    "nodes (count)": "--nnodes",
    "nodes (rank)": "--node-rank",
    "api key (role secret)": "--api-key",
    "api key file (role secret)": "--config",
    "gpus": "--base-gpu-id",
    "gpus (step)": "--gpu-id-step",
}
