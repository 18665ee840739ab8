"""GPU and model presets (YAML data in hardware/ and models/) and Hugging Face config.json readers.

A model preset names the checkpoint's config.json (models/hf/<dir>/config.json: the shapes SGLang
reads), its size on disk, and what the pinned SGLang resolves for it on this GPU beyond the generic
memory rule (`sglang:` section: KV dtype, page size, request cap, CUDA-graph phases, speculative
algorithms it accepts, DeepSeek-V4 pool byte sizes). The `sglang:` values were read from upstream's
own resolution run on the node double (tools/oracle/) and tools/tests/test_upstream_oracle.py
checks them there.

Units: "GB" is 2**30 bytes, as in SGLang's own log lines ("avail mem=... GB" is
`torch.cuda.mem_get_info() / (1 << 30)`); GPU memory is also kept in MiB as nvidia-smi reports it,
which is what SGLang's launch defaults read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from sglnode.planning.sglang_memory import AttentionShape, DSV4Pool
from sglnode.topology.safeyaml import InputFileError, load_json_file, load_yaml_file
from sglnode.topology.schema import Doc, Text, validate_partial

PACKAGE_DIR = Path(__file__).resolve().parent
HARDWARE_DIR = PACKAGE_DIR / "hardware"
MODELS_DIR = PACKAGE_DIR / "models"
HF_CONFIGS_DIR = MODELS_DIR / "hf"
BYTES_PER_GB = 1 << 30
MIB_PER_GB = 1024
SAFETENSORS_INDEX = "model.safetensors.index.json"
ATTENTION_FAMILIES = ("mha", "mla", "dsv4")


class PresetError(ValueError):
    """A preset, config.json or checkpoint that cannot be used; the message says what to change."""


# --- Declared schemas of the preset files (unknown keys refused, numbers finite and in range) -----
Positive = Annotated[float, Field(gt=0)]


class GpuPresetDoc(Doc):
    """hardware/*.yaml, or a preset with `sglnode plan --gpu-mem-gb/--gpu-bw-tbs` overrides."""

    name: Text
    description: Text = ""
    source: Text = ""
    memory_mib: Annotated[float, Field(gt=0, le=16 * 1024 * 1024)]  # up to 16 TiB
    bandwidth_tbs: Annotated[float, Field(gt=0, le=1000)]
    compute_capability: Text = ""
    device_name: Text = ""  # torch.cuda.get_device_name(): SGLang keys tuned kernel configs by it
    interconnect: Text = ""
    nvlink: bool = False
    allreduce_latency_us: Annotated[float, Field(ge=0, le=1e6)] = 10.0


class KvPoolDoc(Doc):
    paged_bytes_by_ratio: dict[int, Positive]
    indexer_bytes_per_token: Annotated[int, Field(ge=0)]
    compress_state_bytes: Annotated[int, Field(ge=0)]
    ring_sizes: dict[int, Annotated[int, Field(ge=1)]]
    ring_sizes_speculative: dict[int, Annotated[int, Field(ge=1)]]
    swa_full_tokens_ratio: Annotated[float, Field(gt=0, le=1)]


class SGLangFactsDoc(Doc):
    kv_cache_dtype: Text = "bfloat16"
    page_size: Annotated[int, Field(ge=1, le=1 << 20)] = 1
    max_running_requests: Annotated[int, Field(ge=1)] | None = None
    prefill_cuda_graph: bool = True
    attention_backend: Text = ""
    speculative_algorithms: list[Text] = Field(default_factory=list)
    speculative_algorithm: Text | None = None
    draft_kv_layers: Annotated[int, Field(ge=0, le=64)] = 0
    draft_in_checkpoint: bool = False
    kv_pool: KvPoolDoc | None = None


class ModelPresetDoc(Doc):
    """models/*.yaml: the checkpoint's config.json (hf_config), its size, and SGLang's facts."""

    name: Text | None = None
    description: Text = ""
    source: Text = ""
    hf_config: Text
    weights_gb: Annotated[float, Field(gt=0, le=1e6)]
    draft_weights_gb: Annotated[float, Field(ge=0, le=1e6)] = 0.0
    quantization: Text | None = None
    expert_bits: Annotated[float, Field(gt=0, le=64)] | None = None
    activation_bits: Annotated[int, Field(ge=1, le=64)] | None = None
    sglang: SGLangFactsDoc = SGLangFactsDoc()


Count = Annotated[int, Field(ge=1, le=1 << 20)]
Size = Annotated[int, Field(ge=0, le=1 << 30)]


class ConfigShapeDoc(BaseModel):
    """What the planner reads from a Hugging Face config.json (its other keys are upstream's business)."""

    model_config = ConfigDict(extra="ignore", strict=True, allow_inf_nan=False)
    num_hidden_layers: Count
    hidden_size: Count
    num_attention_heads: Count
    num_key_value_heads: Count
    head_dim: Count
    v_head_dim: Count | None = None
    kv_lora_rank: Size = 0
    qk_rope_head_dim: Size = 0
    qk_nope_head_dim: Size = 0
    index_head_dim: Size = 0
    compress_ratios: Annotated[list[Size], Field(max_length=1 << 16)] = Field(default_factory=list)
    vocab_size: Size = 0
    n_routed_experts: Size = 0
    num_experts_per_tok: Size = 0
    n_shared_experts: Size = 0
    moe_intermediate_size: Size = 0
    first_k_dense_replace: Size = 0
    expert_bits: Annotated[float, Field(gt=0, le=64)] = 16.0
    num_nextn_predict_layers: Size = 0
    max_position_embeddings: Size = 0


def _validated(cls: type[Doc], data: dict[str, Any], origin: str) -> Any:
    doc, _, problems = validate_partial(cls, data, lambda path: ".".join(str(p) for p in path))
    if problems:
        raise PresetError(f"{origin}: " + "; ".join(str(p) for p in problems))
    return doc


@dataclass(frozen=True)
class GpuSpec:
    name: str
    memory_mib: float  # nvidia-smi --query-gpu=memory.total: what SGLang's defaults read
    bandwidth_tbs: float
    compute_capability: str = ""
    device_name: str = ""  # torch.cuda.get_device_name(): SGLang keys tuned kernel configs by it
    interconnect: str = ""
    nvlink: bool = False
    allreduce_latency_us: float = 10.0
    description: str = ""
    source: str = ""

    @property
    def memory_gb(self) -> float:
        return self.memory_mib / MIB_PER_GB

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["memory_gb"] = round(self.memory_gb, 3)
        return data


@dataclass(frozen=True)
class SGLangModelFacts:
    """What the pinned SGLang resolves for this model on sm_120, beyond the generic memory rule."""

    kv_cache_dtype: str = "bfloat16"  # what --kv-cache-dtype auto becomes
    page_size: int = 1
    max_running_requests: int | None = None  # a per-model default, when SGLang sets one
    prefill_cuda_graph: bool = True  # False where a model override disables prefill capture
    attention_backend: str = ""  # what --attention-backend auto picks on sm_120
    speculative_algorithms: tuple[str, ...] = ()  # the algorithms SGLang accepts for it
    speculative_algorithm: str | None = None  # the one its MTP/EAGLE deployment uses
    draft_kv_layers: int = 0  # draft layers sharing the target's KV pool when speculating
    draft_in_checkpoint: bool = False  # EAGLE drafts with the checkpoint's own MTP layers
    kv_pool: Mapping[str, Any] = field(default_factory=dict)  # DeepSeek-V4 layout byte sizes

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["speculative_algorithms"] = list(self.speculative_algorithms)
        data["kv_pool"] = dict(self.kv_pool)
        return data


@dataclass(frozen=True)
class ModelSpec:
    """The config.json facts the memory and roofline model needs, plus SGLang's per-model facts."""

    name: str
    weights_gb: float
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    attention: str = "mha"  # mha | mla | dsv4
    architecture: str = ""
    quantization: str = "bf16"
    v_head_dim: int | None = None
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    index_head_dim: int = 0
    compress_ratios: tuple[int, ...] = ()
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
    hf_config: str = ""
    sglang: SGLangModelFacts = field(default_factory=SGLangModelFacts)
    description: str = ""
    source: str = ""

    @property
    def is_moe(self) -> bool:
        return self.n_routed_experts > 0 and self.num_experts_per_tok > 0

    def attention_shape(self) -> AttentionShape:
        return AttentionShape(
            family=self.attention,
            num_layers=self.num_hidden_layers,
            num_kv_heads=self.num_key_value_heads,
            head_dim=self.head_dim,
            v_head_dim=self.v_head_dim or self.head_dim,
            kv_lora_rank=self.kv_lora_rank,
            qk_rope_head_dim=self.qk_rope_head_dim,
            draft_kv_layers=self.sglang.draft_kv_layers,
        )

    def dsv4_pool(self) -> DSV4Pool:
        """DeepSeek-V4's pool: layer counts from config.json, layout byte sizes from the preset."""
        pool = self.sglang.kv_pool
        if self.attention != "dsv4" or not pool:
            raise PresetError(f"{self.name}: no DeepSeek-V4 kv_pool facts in its preset")
        layers: dict[int, int] = {}
        for ratio in self.compress_ratios[: self.num_hidden_layers]:
            if ratio:
                layers[ratio] = layers.get(ratio, 0) + 1
        return DSV4Pool(
            num_layers=self.num_hidden_layers,
            layers_by_ratio=layers,
            paged_bytes_by_ratio={int(k): float(v) for k, v in pool["paged_bytes_by_ratio"].items()},
            indexer_bytes_per_token=int(pool["indexer_bytes_per_token"]),
            attn_head_dim=self.qk_nope_head_dim + self.qk_rope_head_dim,
            indexer_head_dim=self.index_head_dim,
            compress_state_bytes=int(pool["compress_state_bytes"]),
            ring_sizes={int(k): int(v) for k, v in pool["ring_sizes"].items()},
            ring_sizes_speculative={int(k): int(v) for k, v in pool["ring_sizes_speculative"].items()},
            swa_full_tokens_ratio=float(pool["swa_full_tokens_ratio"]),
            page_size=self.sglang.page_size,
        )

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data["compress_ratios"] = list(self.compress_ratios)
        data["sglang"] = self.sglang.to_json()
        return data


def list_presets(directory: Path) -> list[str]:
    return sorted(p.stem for p in directory.glob("*.yaml"))


def _load_yaml(directory: Path, name: str, kind: str) -> dict[str, Any]:
    path = directory / f"{name}.yaml"
    if name not in list_presets(directory):  # a name, never a path that leaves the directory
        known = ", ".join(list_presets(directory))
        raise PresetError(f"unknown {kind} preset {name!r}; known: {known}")
    try:
        data = load_yaml_file(path, what=f"{kind} preset")
    except InputFileError as exc:
        raise PresetError(str(exc)) from exc
    if not isinstance(data, dict):
        raise PresetError(f"{path} is not a mapping")
    return data


def load_gpu(name_or_spec: str | dict[str, Any] | GpuSpec) -> GpuSpec:
    """A GPU by preset name, or from a dict with at least name, memory_mib (or memory_gb), bandwidth_tbs."""
    if isinstance(name_or_spec, GpuSpec):
        return name_or_spec
    if isinstance(name_or_spec, str):
        data = _load_yaml(HARDWARE_DIR, name_or_spec, "GPU")
        origin = f"GPU preset {name_or_spec}"
    else:
        data = dict(name_or_spec)
        origin = "gpu"
        if "preset" in data:
            base = _load_yaml(HARDWARE_DIR, str(data.pop("preset")), "GPU")
            data = {**base, **data}
        if "memory_gb" in data:
            memory_gb = data.pop("memory_gb")
            is_number = isinstance(memory_gb, int | float) and not isinstance(memory_gb, bool)
            data["memory_mib"] = memory_gb * MIB_PER_GB if is_number else memory_gb
        data.setdefault("name", "custom")
    doc = _validated(GpuPresetDoc, data, origin)
    return GpuSpec(**doc.model_dump())


def _sglang_facts(doc: SGLangFactsDoc) -> SGLangModelFacts:
    data = doc.model_dump(exclude={"kv_pool", "speculative_algorithms"})
    return SGLangModelFacts(
        **data,
        speculative_algorithms=tuple(doc.speculative_algorithms),
        kv_pool=doc.kv_pool.model_dump() if doc.kv_pool else {},
    )


def load_hf_config(directory: str) -> dict[str, Any]:
    return load_config_json(HF_CONFIGS_DIR / directory / "config.json")


def load_model_preset(name: str) -> ModelSpec:
    doc: ModelPresetDoc = _validated(
        ModelPresetDoc, _load_yaml(MODELS_DIR, name, "model"), f"model preset {name}"
    )
    if doc.hf_config not in {p.name for p in HF_CONFIGS_DIR.iterdir() if p.is_dir()}:
        raise PresetError(
            f"model preset {name}: hf_config {doc.hf_config!r} is not a directory of {HF_CONFIGS_DIR}"
        )
    base = model_from_config(load_hf_config(doc.hf_config), weights_gb=doc.weights_gb, name=name)
    overrides = doc.model_dump(
        include={"name", "description", "source", "draft_weights_gb"}, exclude_unset=True
    )
    for key in ("quantization", "expert_bits", "activation_bits"):
        if getattr(doc, key) is not None:
            overrides[key] = getattr(doc, key)
    return ModelSpec(
        **{
            **base.to_json(),
            **overrides,
            "hf_config": doc.hf_config,
            "sglang": _sglang_facts(doc.sglang),
            "compress_ratios": base.compress_ratios,
        }
    )


def _first(config: dict[str, Any], *keys: str, default: Any = None) -> Any:
    for key in keys:
        if config.get(key) is not None:
            return config[key]
    return default


# Weight bits per quant_method when config.json's quantization_config gives no "bits".
QUANT_METHOD_BITS = {"fp8": 8.0, "mxfp4": 4.25, "nvfp4": 4.5, "modelopt_fp4": 4.5, "w4afp8": 4.25}


def attention_family(config: dict[str, Any]) -> str:
    """How SGLang sizes this model's KV pool: DeepSeek-V4 compressed pools, MLA latents, or per-head K/V."""
    if config.get("model_type") == "deepseek_v4" or "DeepseekV4ForCausalLM" in (
        config.get("architectures") or ()
    ):
        return "dsv4"
    return "mla" if config.get("kv_lora_rank") else "mha"


def _config_shape(config: dict[str, Any], name: str) -> tuple[dict[str, Any], ConfigShapeDoc]:
    text = config.get("text_config") or config
    if not isinstance(text, dict):
        raise PresetError(f"{name}: config.json's text_config is not an object")
    hidden = _first(text, "hidden_size", "d_model")
    heads = _first(text, "num_attention_heads", "n_head")
    layers = _first(text, "num_hidden_layers", "n_layer")
    if not (hidden and heads and layers):
        raise PresetError(f"{name}: config.json lacks hidden_size / num_attention_heads / num_hidden_layers")
    quant = text.get("quantization_config") or {}
    if not isinstance(quant, dict):
        raise PresetError(f"{name}: config.json's quantization_config is not an object")
    quant_method = str(quant.get("quant_method", "")).lower()
    integer_heads = isinstance(hidden, int) and isinstance(heads, int) and heads > 0
    shape = {
        "num_hidden_layers": layers,
        "hidden_size": hidden,
        "num_attention_heads": heads,
        "num_key_value_heads": _first(text, "num_key_value_heads", default=heads),
        "head_dim": _first(text, "head_dim", default=hidden // heads if integer_heads else hidden),
        "v_head_dim": text.get("v_head_dim"),
        "kv_lora_rank": text.get("kv_lora_rank") or 0,
        "qk_rope_head_dim": text.get("qk_rope_head_dim") or 0,
        "qk_nope_head_dim": text.get("qk_nope_head_dim") or 0,
        "index_head_dim": text.get("index_head_dim") or 0,
        "compress_ratios": text.get("compress_ratios") or [],
        "vocab_size": text.get("vocab_size") or 0,
        "n_routed_experts": _first(text, "n_routed_experts", "num_experts", "num_local_experts", default=0),
        "num_experts_per_tok": _first(text, "num_experts_per_tok", "moe_topk", default=0),
        "n_shared_experts": text.get("n_shared_experts") or 0,
        "moe_intermediate_size": _first(text, "moe_intermediate_size", "intermediate_size", default=0),
        "first_k_dense_replace": text.get("first_k_dense_replace") or 0,
        "expert_bits": quant.get("bits") or QUANT_METHOD_BITS.get(quant_method, 16.0),
        "num_nextn_predict_layers": text.get("num_nextn_predict_layers") or 0,
        "max_position_embeddings": text.get("max_position_embeddings") or 0,
    }
    if isinstance(shape["expert_bits"], int) and not isinstance(shape["expert_bits"], bool):
        shape["expert_bits"] = float(shape["expert_bits"])
    doc, _, problems = validate_partial(ConfigShapeDoc, shape, lambda path: ".".join(str(p) for p in path))
    if problems:
        raise PresetError(f"{name}: config.json: " + "; ".join(str(p) for p in problems))
    return text, doc


def model_from_config(config: dict[str, Any], weights_gb: float, name: str = "config") -> ModelSpec:
    """A ModelSpec from a Hugging Face config.json (the fields SGLang's ModelConfig reads)."""
    text, shape = _config_shape(config, name)
    family = attention_family(text)
    quant = text.get("quantization_config") or {}
    quant_method = str(quant.get("quant_method", "")).lower()
    architectures = text.get("architectures") or config.get("architectures") or [""]
    if not isinstance(architectures, list) or not architectures:
        architectures = [""]
    rope = shape.qk_rope_head_dim
    return ModelSpec(
        name=name,
        weights_gb=float(weights_gb),
        architecture=str(architectures[0]),
        quantization=quant_method or str(text.get("torch_dtype", "bf16")),
        num_hidden_layers=shape.num_hidden_layers,
        hidden_size=shape.hidden_size,
        num_attention_heads=shape.num_attention_heads,
        num_key_value_heads=shape.num_key_value_heads,
        head_dim=shape.head_dim,
        v_head_dim=shape.v_head_dim,
        attention=family,
        kv_lora_rank=shape.kv_lora_rank,
        qk_rope_head_dim=rope,
        # DeepSeek-V4: head_dim is the whole latent (nope + rope), as SGLang's ModelConfig reads it.
        qk_nope_head_dim=shape.qk_nope_head_dim or (shape.head_dim - rope if family == "dsv4" else 0),
        index_head_dim=shape.index_head_dim,
        compress_ratios=tuple(shape.compress_ratios),
        vocab_size=shape.vocab_size,
        n_routed_experts=shape.n_routed_experts,
        num_experts_per_tok=shape.num_experts_per_tok,
        n_shared_experts=shape.n_shared_experts,
        moe_intermediate_size=shape.moe_intermediate_size,
        first_k_dense_replace=shape.first_k_dense_replace,
        expert_bits=shape.expert_bits,
        num_nextn_predict_layers=shape.num_nextn_predict_layers,
        max_position_embeddings=shape.max_position_embeddings,
    )


def load_config_json(path: str | Path) -> dict[str, Any]:
    try:
        data = load_json_file(path, what="config.json")
    except InputFileError as exc:
        raise PresetError(str(exc)) from exc
    if not isinstance(data, dict):
        raise PresetError(f"{path}: config.json is not a JSON object")
    return data


def weights_gb_from_checkpoint(checkpoint: str | Path) -> float:
    """Total weight size from a checkpoint's model.safetensors.index.json (metadata.total_size bytes)."""
    path = Path(checkpoint)
    index = path / SAFETENSORS_INDEX if path.is_dir() else path
    try:
        data = load_json_file(index, what="checkpoint index")
        total = data["metadata"]["total_size"]
    except InputFileError as exc:
        raise PresetError(str(exc)) from exc
    except (KeyError, TypeError) as exc:
        raise PresetError(f"cannot read metadata.total_size from {index}: no {exc}") from exc
    if not isinstance(total, int) or isinstance(total, bool) or total <= 0:
        raise PresetError(f"{index}: metadata.total_size must be a positive integer, got {total!r}")
    return total / BYTES_PER_GB
