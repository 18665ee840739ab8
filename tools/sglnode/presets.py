"""GPU and model presets (YAML data in hardware/ and models/) and HF config.json / checkpoint readers.

Units: "GB" here means 2**30 bytes, as in SGLang's own log lines ("avail mem=... GB" is
`torch.cuda.mem_get_info() / (1 << 30)`, srt/utils/common.py get_available_gpu_memory).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

PACKAGE_DIR = Path(__file__).resolve().parent
HARDWARE_DIR = PACKAGE_DIR / "hardware"
MODELS_DIR = PACKAGE_DIR / "models"
BYTES_PER_GB = 1 << 30
SAFETENSORS_INDEX = "model.safetensors.index.json"


class PresetError(ValueError):
    """A preset, config.json or checkpoint that cannot be used; the message says what to change."""


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_gb: float
    bandwidth_tbs: float
    compute_capability: str = ""
    interconnect: str = ""
    nvlink: bool = False
    allreduce_latency_us: float = 10.0
    description: str = ""
    source: str = ""

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class ModelSpec:
    """The config.json facts the memory and roofline model needs."""

    name: str
    weights_gb: float
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    attention: str = "mha"  # mha | mla | compressed
    architecture: str = ""
    quantization: str = "bf16"
    v_head_dim: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    kv_cache_bytes_per_token: int = 0  # only for attention == "compressed"
    vocab_size: int = 0
    n_routed_experts: int = 0
    num_experts_per_tok: int = 0
    n_shared_experts: int = 0
    moe_intermediate_size: int = 0
    first_k_dense_replace: int = 0
    expert_bits: float = 16.0
    activation_bits: int = 16
    num_nextn_predict_layers: int = 0
    draft_weights_gb: float = 0.0
    max_position_embeddings: int = 0
    description: str = ""
    source: str = ""

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0 and self.num_experts_per_tok > 0

    def to_json(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


def list_presets(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def _load_yaml(directory: Path, name: str, kind: str) -> dict[str, Any]:
    path = directory / f"{name}.yaml"
    if not path.is_file():
        known = ", ".join(list_presets(directory))
        raise PresetError(f"unknown {kind} preset {name!r}; known: {known}")
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise PresetError(f"{path} is not a mapping")
    return data


def _build(cls: type, data: dict[str, Any], origin: str) -> Any:
    known = {f.name for f in fields(cls)}
    try:
        return cls(**{k: v for k, v in data.items() if k in known})
    except TypeError as exc:
        raise PresetError(f"{origin}: {exc}") from exc


def load_gpu(name_or_spec: str | dict[str, Any] | GpuSpec) -> GpuSpec:
    """A GPU by preset name, or from a dict with at least name, memory_gb, bandwidth_tbs."""
    if isinstance(name_or_spec, GpuSpec):
        return name_or_spec
    if isinstance(name_or_spec, str):
        return _build(GpuSpec, _load_yaml(HARDWARE_DIR, name_or_spec, "GPU"), name_or_spec)
    data = dict(name_or_spec)
    if "preset" in data:
        base = _load_yaml(HARDWARE_DIR, str(data.pop("preset")), "GPU")
        data = {**base, **data}
    data.setdefault("name", "custom")
    return _build(GpuSpec, data, "gpu")


def load_model_preset(name: str) -> ModelSpec:
    return _build(ModelSpec, _load_yaml(MODELS_DIR, name, "model"), name)


def _first(config: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return default


# Weight bits per quant_method when config.json's quantization_config gives no "bits".
QUANT_METHOD_BITS = {"fp8": 8.0, "mxfp4": 4.25, "nvfp4": 4.5, "modelopt_fp4": 4.5, "w4afp8": 4.25}


def model_from_config(config: dict[str, Any], weights_gb: float, name: str = "config") -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (the fields SGLang's ModelConfig reads)."""
    text = config.get("text_config") or config
    hidden = int(_first(text, "hidden_size", "d_model", default=0))
    heads = int(_first(text, "num_attention_heads", "n_head", default=0))
    layers = int(_first(text, "num_hidden_layers", "n_layer", default=0))
    if not (hidden and heads and layers):
        raise PresetError(f"{name}: config.json lacks hidden_size / num_attention_heads / num_hidden_layers")
    kv_lora_rank = int(text.get("kv_lora_rank") or 0)
    quant = text.get("quantization_config") or {}
    quant_method = str(quant.get("quant_method", "")).lower()
    expert_bits = float(quant.get("bits") or QUANT_METHOD_BITS.get(quant_method, 16.0))
    architectures = text.get("architectures") or config.get("architectures") or [""]
    return ModelSpec(
        name=name,
        weights_gb=float(weights_gb),
        architecture=str(architectures[0]),
        quantization=quant_method or str(text.get("torch_dtype", "bf16")),
        num_hidden_layers=layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=int(_first(text, "num_key_value_heads", default=heads)),
        head_dim=int(_first(text, "head_dim", default=hidden // heads)),
        v_head_dim=text.get("v_head_dim"),
        attention="mla" if kv_lora_rank else "mha",
        kv_lora_rank=kv_lora_rank,
        qk_rope_head_dim=int(text.get("qk_rope_head_dim") or 0),
        vocab_size=int(text.get("vocab_size") or 0),
        n_routed_experts=int(_first(text, "n_routed_experts", "num_experts", "num_local_experts", default=0)),
        num_experts_per_tok=int(_first(text, "num_experts_per_tok", "moe_topk", default=0)),
        n_shared_experts=int(text.get("n_shared_experts") or 0),
        moe_intermediate_size=int(_first(text, "moe_intermediate_size", "intermediate_size", default=0)),
        first_k_dense_replace=int(text.get("first_k_dense_replace") or 0),
        expert_bits=expert_bits,
        num_nextn_predict_layers=int(text.get("num_nextn_predict_layers") or 0),
        max_position_embeddings=int(text.get("max_position_embeddings") or 0),
    )


def load_config_json(path: str | Path) -> dict[str, Any]:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise PresetError(f"cannot read config.json {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise PresetError(f"{path}: config.json is not a JSON object")
    return data


def weights_gb_from_checkpoint(checkpoint: str | Path) -> float:
    """Total weight size from a checkpoint's model.safetensors.index.json (metadata.total_size bytes)."""
    path = Path(checkpoint)
    index = path / SAFETENSORS_INDEX if path.is_dir() else path
    try:
        data = json.loads(index.read_text(encoding="utf-8"))
        total = int(data["metadata"]["total_size"])
    except (OSError, json.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        raise PresetError(f"cannot read metadata.total_size from {index}: {exc}") from exc
    return total / BYTES_PER_GB
