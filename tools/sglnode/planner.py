"""Will it fit, and how fast can it be? SGLang's memory budget and a decode roofline.

Memory follows SGLang 0.5.23's own rule (sgl-project/sglang,
python/sglang/srt/model_executor/model_runner_kv_cache_mixin.py, `_profile_available_bytes` /
`profile_max_num_token`):

    rest_memory = available_gpu_memory - pre_model_load_memory * (1 - mem_fraction_static)
    if rest_memory <= 0: RuntimeError("Not enough memory. Please try to increase --mem-fraction-static.")
    max_total_num_tokens = rest_memory // cell_size

where `available_gpu_memory` is the free memory after the weights are loaded (min over TP ranks)
and `pre_model_load_memory` the free memory before loading. Whatever is not weights or KV pool,
`pre * (1 - mem_fraction_static)`, is the headroom for activations, CUDA graphs and NCCL.
`cell_size` (bytes per token per GPU) follows `get_cell_size_per_token` in the same file.

Units: "GB" is 2**30 bytes, as in SGLang's log lines. Everything here is a model, not a
measurement; the numbers it prints are estimates to decide before launching.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglnode.presets import (
    BYTES_PER_GB,
    GpuSpec,
    ModelSpec,
    PresetError,
    load_config_json,
    load_gpu,
    load_model_preset,
    model_from_config,
    weights_gb_from_checkpoint,
)

# --- Constants, each with where it comes from ---------------------------------------------------
# Memory gone before weights load: CUDA context (~0.5 GB on Hopper/Blackwell with lazy module
# loading) plus, with TP > 1, NCCL communicators and SGLang's custom all-reduce buffers. Chosen so
# the known DeepSeek-V4-Pro on 8x H200 case lands on its observed minimum fraction (~0.91).
CUDA_CONTEXT_GB = 0.6
TP_COMMUNICATOR_GB = 0.9
# SGLang sizes its per-batch-size CUDA graph reserve at 2 MB per captured batch size
# (server_args.py, _handle_gpu_memory_settings: `reserved_mem += cuda_graph_max_bs * 2`, in MB).
CUDA_GRAPH_MB_PER_BATCH = 2.0
# cuBLAS/cuDNN workspaces, sampler buffers, allocator fragmentation: a floor seen in practice.
RUNTIME_WORKSPACE_GB = 1.0
# Live activation tensors per prefill token, in units of hidden_size elements (qkv, attention
# output, gate/up/down, residual, norms, MoE dispatch copies): an estimate, not an SGLang constant.
ACTIVATION_TENSORS_PER_TOKEN = 16
# SGLang's defaults for GPUs with 80-160 GB (server_args.py, _handle_gpu_memory_settings).
DEFAULT_CHUNKED_PREFILL_SIZE = 8192
DEFAULT_CUDA_GRAPH_MAX_BS = 256
# Fraction of peak memory bandwidth a decode step reaches (weight-streaming GEMV/grouped GEMM).
ACHIEVABLE_BANDWIDTH_FRACTION = 0.8
# Two TP all-reduces per transformer layer in decode (after attention, after the MLP/MoE).
ALLREDUCES_PER_LAYER = 2
# Tokens of context each running request has on average during the roofline's decode steps.
DEFAULT_ROOFLINE_CONTEXT_TOKENS = 2048
DEFAULT_CONCURRENCY = (1, 16, 64)
# KV element bytes per --kv-cache-dtype (fp4 adds one fp8 scale per 16 values: 0.5 + 1/16).
KV_DTYPE_BYTES = {
    "fp8_e4m3": 1.0,
    "fp8_e5m2": 1.0,
    "fp8": 1.0,
    "bf16": 2.0,
    "bfloat16": 2.0,
    "fp16": 2.0,
    "float16": 2.0,
    "fp4_e2m1": 0.5 + 1 / 16,
}
FRACTION_STEP = 0.001  # min_mem_fraction_static is rounded up to this step
SPECULATIVE_ALGORITHMS_WITH_DRAFT_KV = ("EAGLE", "EAGLE3", "NEXTN", "MTP", "STANDALONE")

PHASE_WEIGHTS = "weights"
PHASE_KV_CACHE = "kv_cache"
PHASE_CUDA_GRAPH = "cuda_graph"
NOT_ENOUGH_MEMORY = "Not enough memory. Please try to increase --mem-fraction-static."


@dataclass(frozen=True)
class ServerSpec:
    tp: int = 1
    dp: int = 1
    ep: int = 1
    mem_fraction_static: float = 0.85
    kv_cache_dtype: str = "auto"
    context_length: int | None = None
    cuda_graph_max_bs: int = DEFAULT_CUDA_GRAPH_MAX_BS
    chunked_prefill_size: int = DEFAULT_CHUNKED_PREFILL_SIZE
    speculative_algorithm: str | None = None
    speculative_draft_gb: float | None = None


@dataclass(frozen=True)
class RooflinePoint:
    concurrency: int
    decode_tok_s: float
    per_request_tok_s: float
    bytes_per_step_gb: float
    batch_per_replica: int
    limited_by_kv_cache: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "decode_tok_s": round(self.decode_tok_s, 2),
            "per_request_tok_s": round(self.per_request_tok_s, 3),
            "bytes_per_step_gb": round(self.bytes_per_step_gb, 4),
            "batch_per_replica": self.batch_per_replica,
            "limited_by_kv_cache": self.limited_by_kv_cache,
        }


@dataclass
class PlanResult:
    fits: bool
    failure_phase: str | None
    reason: str
    gpu: GpuSpec
    model: ModelSpec
    server: ServerSpec
    context_length: int
    pre_load_free_gb: float
    weights_per_gpu_gb: float
    kv_cell_bytes: float
    kv_pool_gb: float
    kv_tokens: int
    max_concurrent_requests: int
    headroom_gb: float
    runtime_need_gb: float
    min_mem_fraction_static: float | None
    roofline: list[RooflinePoint] = field(default_factory=list)
    roofline_context_tokens: int = DEFAULT_ROOFLINE_CONTEXT_TOKENS

    @property
    def avail_after_weights_gb(self) -> float:
        return self.pre_load_free_gb - self.weights_per_gpu_gb

    def to_json(self) -> dict[str, Any]:
        """The documented, stable JSON of `sglnode plan --json` (other tools read these keys)."""
        return {
            "fits": self.fits,
            "failure_phase": self.failure_phase,
            "reason": self.reason,
            "gpu": self.gpu.to_json(),
            "model": self.model.to_json(),
            "tp": self.server.tp,
            "dp": self.server.dp,
            "ep": self.server.ep,
            "mem_fraction_static": self.server.mem_fraction_static,
            "kv_cache_dtype": self.server.kv_cache_dtype,
            "weights_per_gpu_gb": round(self.weights_per_gpu_gb, 3),
            "pre_load_free_gb": round(self.pre_load_free_gb, 3),
            "kv_cell_bytes_per_token": round(self.kv_cell_bytes, 2),
            "kv_pool_gb": round(self.kv_pool_gb, 3),
            "kv_tokens": self.kv_tokens,
            "max_concurrent_requests": self.max_concurrent_requests,
            "context_length": self.context_length,
            "headroom_gb": round(self.headroom_gb, 3),
            "runtime_need_gb": round(self.runtime_need_gb, 3),
            "min_mem_fraction_static": self.min_mem_fraction_static,
            "roofline_context_tokens": self.roofline_context_tokens,
            "roofline": [point.to_json() for point in self.roofline],
            "simulated_estimate": True,
        }


# --- Memory model -------------------------------------------------------------------------------
def pre_load_free_gb(gpu: GpuSpec, tp: int) -> float:
    """Free memory on each GPU just before weights load (SGLang's `pre_model_load_memory`)."""
    return gpu.memory_gb - CUDA_CONTEXT_GB - (TP_COMMUNICATOR_GB if tp > 1 else 0.0)


def draft_weights_gb(model: ModelSpec, server: ServerSpec) -> float:
    """Weights the speculative draft worker loads on top of the target (0 without speculation)."""
    if not server.speculative_algorithm:
        return 0.0
    if server.speculative_draft_gb is not None:
        return server.speculative_draft_gb
    if model.draft_weights_gb:
        return model.draft_weights_gb
    # MTP/NEXTN drafts load the checkpoint's nextn layer(s): about one decoder layer each.
    return model.weights_gb / max(model.num_hidden_layers, 1) * max(model.num_nextn_predict_layers, 1)


def weights_per_gpu_gb(model: ModelSpec, server: ServerSpec) -> float:
    # Attention/dense weights are TP-sharded and experts are split over the EP group inside the
    # same TP ranks (SGLang requires ep_size <= tp_size), so each GPU holds 1/tp of the total.
    return (model.weights_gb + draft_weights_gb(model, server)) / server.tp


def kv_dtype_bytes(model: ModelSpec, kv_cache_dtype: str) -> float:
    if kv_cache_dtype == "auto":
        return model.activation_bits / 8
    try:
        return KV_DTYPE_BYTES[kv_cache_dtype]
    except KeyError as exc:
        known = ", ".join(["auto", *KV_DTYPE_BYTES])
        raise PresetError(f"unknown --kv-cache-dtype {kv_cache_dtype!r}; known: {known}") from exc


def kv_cell_bytes(model: ModelSpec, server: ServerSpec) -> float:
    """Bytes of KV cache per token on one GPU (SGLang's `get_cell_size_per_token`)."""
    layers = model.num_hidden_layers
    if model.attention == "compressed":
        # DeepSeek-V4's compressed pools have their own fixed format; the preset gives bytes/token.
        cell = float(model.kv_cache_bytes_per_token)
    elif model.attention == "mla":
        # MLA stores one latent (kv_lora_rank + rope dims) per token, replicated on every TP rank.
        cell = (
            (model.kv_lora_rank + model.qk_rope_head_dim)
            * layers
            * kv_dtype_bytes(model, server.kv_cache_dtype)
        )
    else:
        # get_num_kv_heads(tp) = max(1, total_kv_heads // tp): KV heads are sharded, never below 1.
        heads = max(1, model.num_key_value_heads // server.tp)
        v_head_dim = model.v_head_dim or model.head_dim
        cell = heads * (model.head_dim + v_head_dim) * layers * kv_dtype_bytes(model, server.kv_cache_dtype)
    if (server.speculative_algorithm or "").upper() in SPECULATIVE_ALGORITHMS_WITH_DRAFT_KV:
        # EAGLE/MTP drafts keep their own KV in the same pool: the cell grows by their layers.
        draft_layers = max(model.num_nextn_predict_layers, 1)
        cell *= (layers + draft_layers) / layers
    return cell


def runtime_need_gb(model: ModelSpec, server: ServerSpec) -> float:
    """Memory that must stay free after the KV pool: workspaces, prefill activations, CUDA graphs."""
    activation_bytes = (
        server.chunked_prefill_size
        * model.hidden_size
        * (model.activation_bits / 8)
        * ACTIVATION_TENSORS_PER_TOKEN
    )
    graph_gb = server.cuda_graph_max_bs * CUDA_GRAPH_MB_PER_BATCH / 1024
    return RUNTIME_WORKSPACE_GB + activation_bytes / BYTES_PER_GB + graph_gb


def min_viable_fraction(pre_gb: float, weights_gb: float, need_gb: float) -> float | None:
    """Smallest mem_fraction_static with rest_memory > 0 that still leaves the runtime headroom."""
    if weights_gb >= pre_gb:
        return None
    fraction = math.floor(weights_gb / pre_gb / FRACTION_STEP + 1) * FRACTION_STEP
    fraction = round(fraction, 3)
    if fraction >= 1.0 or pre_gb * (1 - fraction) < need_gb:
        return None
    return fraction


# --- Roofline -----------------------------------------------------------------------------------
def expert_bytes_total(model: ModelSpec) -> float:
    """Bytes of routed-expert weights (gate, up, down per expert) across the MoE layers."""
    if not model.is_moe:
        return 0.0
    moe_layers = model.num_hidden_layers - model.first_k_dense_replace
    per_expert = 3 * model.hidden_size * model.moe_intermediate_size * model.expert_bits / 8
    # Never more than the checkpoint holds: presets with assumed shapes stay consistent.
    return min(moe_layers * model.n_routed_experts * per_expert, model.weights_gb * BYTES_PER_GB)


def expected_distinct_experts(n_experts: int, top_k: int, batch: int) -> float:
    """Expected experts hit by `batch` tokens each picking top_k of n (uniform routing)."""
    if n_experts <= 0 or top_k <= 0:
        return 0.0
    return n_experts * (1 - (1 - top_k / n_experts) ** batch)


def decode_bytes_per_gpu(model: ModelSpec, server: ServerSpec, batch: int, context_tokens: int) -> float:
    experts = expert_bytes_total(model)
    dense = model.weights_gb * BYTES_PER_GB - experts
    hit_fraction = (
        expected_distinct_experts(model.n_routed_experts, model.num_experts_per_tok, batch)
        / model.n_routed_experts
        if model.is_moe
        else 0.0
    )
    kv_read = batch * context_tokens * kv_cell_bytes(model, server)
    return (dense + experts * hit_fraction) / server.tp + kv_read


def roofline_point(
    model: ModelSpec,
    gpu: GpuSpec,
    server: ServerSpec,
    *,
    concurrency: int,
    context_tokens: int,
    capacity_per_replica: int,
) -> RooflinePoint:
    batch = math.ceil(concurrency / server.dp)
    limited = capacity_per_replica > 0 and batch > capacity_per_replica
    if limited:
        batch = capacity_per_replica
    batch = max(batch, 1)
    step_bytes = decode_bytes_per_gpu(model, server, batch, context_tokens)
    step_s = step_bytes / (gpu.bandwidth_tbs * 1e12 * ACHIEVABLE_BANDWIDTH_FRACTION)
    if server.tp > 1:
        step_s += model.num_hidden_layers * ALLREDUCES_PER_LAYER * gpu.allreduce_latency_us * 1e-6
    running = min(concurrency, batch * server.dp)
    return RooflinePoint(
        concurrency=concurrency,
        decode_tok_s=running / step_s,
        per_request_tok_s=1 / step_s,
        bytes_per_step_gb=step_bytes / BYTES_PER_GB,
        batch_per_replica=batch,
        limited_by_kv_cache=limited,
    )


# --- The plan -----------------------------------------------------------------------------------
def _validate(model: ModelSpec, server: ServerSpec) -> None:
    if server.tp < 1 or server.dp < 1 or server.ep < 1:
        raise PresetError("tp, dp and ep must be >= 1")
    if server.ep > server.tp:
        raise PresetError(f"ep ({server.ep}) must not exceed tp ({server.tp}) in SGLang")
    if not 0 < server.mem_fraction_static < 1:
        raise PresetError(f"mem_fraction_static must be in (0, 1), got {server.mem_fraction_static}")
    if model.weights_gb <= 0:
        raise PresetError("model weights unknown: give --weights-gb or --checkpoint")


def plan(
    model: ModelSpec,
    gpu: GpuSpec,
    server: ServerSpec,
    concurrency: tuple[int, ...] | list[int] = DEFAULT_CONCURRENCY,
    roofline_context_tokens: int = DEFAULT_ROOFLINE_CONTEXT_TOKENS,
) -> PlanResult:
    _validate(model, server)
    context = server.context_length or model.max_position_embeddings or roofline_context_tokens
    pre = pre_load_free_gb(gpu, server.tp)
    weights = weights_per_gpu_gb(model, server)
    cell = kv_cell_bytes(model, server)
    need = runtime_need_gb(model, server)
    fraction = server.mem_fraction_static
    result = PlanResult(
        fits=False,
        failure_phase=None,
        reason="",
        gpu=gpu,
        model=model,
        server=server,
        context_length=context,
        pre_load_free_gb=pre,
        weights_per_gpu_gb=weights,
        kv_cell_bytes=cell,
        kv_pool_gb=0.0,
        kv_tokens=0,
        max_concurrent_requests=0,
        headroom_gb=max(pre - weights, 0.0),
        runtime_need_gb=need,
        min_mem_fraction_static=min_viable_fraction(pre, weights, need),
        roofline_context_tokens=roofline_context_tokens,
    )
    if weights >= pre:
        result.failure_phase = PHASE_WEIGHTS
        result.reason = (
            f"weights need {weights:.2f} GB per GPU but only {pre:.2f} GB is free before loading "
            "(torch.OutOfMemoryError while loading); "
            f"raise --tp above {server.tp} or use a smaller checkpoint"
        )
        return result
    rest_gb = pre - weights - pre * (1 - fraction)  # SGLang 0.5.23 _profile_available_bytes
    if rest_gb <= 0:
        result.failure_phase = PHASE_KV_CACHE
        minimum = result.min_mem_fraction_static
        hint = f"; minimum viable --mem-fraction-static is {minimum}" if minimum else ""
        result.reason = (
            f"{NOT_ENOUGH_MEMORY} Current value: mem_fraction_static={fraction} "
            f"(rest = {pre - weights:.2f} - {pre:.2f} x (1 - {fraction}) = {rest_gb:.2f} GB){hint}"
        )
        return result
    result.kv_tokens = int(rest_gb * BYTES_PER_GB // cell)
    result.kv_pool_gb = result.kv_tokens * cell / BYTES_PER_GB
    result.headroom_gb = pre - weights - result.kv_pool_gb
    result.max_concurrent_requests = (result.kv_tokens // context) * server.dp
    capacity = result.kv_tokens // max(roofline_context_tokens, 1)
    result.roofline = [
        roofline_point(
            model,
            gpu,
            server,
            concurrency=c,
            context_tokens=roofline_context_tokens,
            capacity_per_replica=capacity,
        )
        for c in concurrency
    ]
    if result.headroom_gb < need:
        result.failure_phase = PHASE_CUDA_GRAPH
        result.reason = (
            f"headroom {result.headroom_gb:.2f} GB after the KV pool is below the {need:.2f} GB that "
            f"activations and CUDA graphs (max bs {server.cuda_graph_max_bs}) need; lower "
            f"--mem-fraction-static or --cuda-graph-max-bs"
        )
        return result
    result.fits = True
    result.reason = (
        f"{weights:.2f} GB weights + {result.kv_pool_gb:.2f} GB KV ({result.kv_tokens} tokens) "
        f"per GPU, {result.headroom_gb:.2f} GB headroom"
    )
    if result.kv_tokens < context:
        result.reason += f"; the KV pool holds fewer tokens than one {context}-token context"
    return result


# --- The API the topology tools call --------------------------------------------------------------
def resolve_model(model: dict[str, Any]) -> ModelSpec:
    """A topology's model section: {preset?, config? (path or dict), weights_gb?, checkpoint?}."""
    weights = model.get("weights_gb")
    if weights is None and model.get("checkpoint"):
        weights = weights_gb_from_checkpoint(model["checkpoint"])
    if model.get("preset"):
        spec = load_model_preset(str(model["preset"]))
        overrides: dict[str, Any] = {}
        if weights is not None:
            overrides["weights_gb"] = float(weights)
        if model.get("quantization"):
            overrides["quantization"] = str(model["quantization"])
        return ModelSpec(**{**spec.to_json(), **overrides}) if overrides else spec
    if model.get("config"):
        config = model["config"]
        data = config if isinstance(config, dict) else load_config_json(config)
        name = "config" if isinstance(config, dict) else Path(str(config)).parent.name or "config"
        return model_from_config(data, weights_gb=float(weights or 0.0), name=name)
    raise PresetError("model needs a preset or a config (config.json path or dict)")


def resolve_server(server: dict[str, Any]) -> ServerSpec:
    """A topology's server entry (tp, dp?, ep?, mem_fraction_static, ...) as a ServerSpec."""
    speculative = server.get("speculative")
    algorithm: str | None = None
    draft_gb: float | None = None
    if isinstance(speculative, dict):
        algorithm = speculative.get("algorithm") or "NEXTN"
        draft_gb = speculative.get("draft_weights_gb")
    elif isinstance(speculative, str) and speculative:
        algorithm = speculative
    elif speculative:
        algorithm = "NEXTN"
    if "mem_fraction_static" not in server:
        raise PresetError("server entry needs mem_fraction_static")
    return ServerSpec(
        tp=int(server.get("tp", 1)),
        dp=int(server.get("dp") or 1),
        ep=int(server.get("ep") or 1),
        mem_fraction_static=float(server["mem_fraction_static"]),
        kv_cache_dtype=str(server.get("kv_cache_dtype") or "auto"),
        context_length=int(server["context_length"]) if server.get("context_length") else None,
        cuda_graph_max_bs=int(server.get("cuda_graph_max_bs_decode") or DEFAULT_CUDA_GRAPH_MAX_BS),
        chunked_prefill_size=int(server.get("chunked_prefill_size") or DEFAULT_CHUNKED_PREFILL_SIZE),
        speculative_algorithm=algorithm,
        speculative_draft_gb=float(draft_gb) if draft_gb is not None else None,
    )


def plan_server(
    model: dict[str, Any],
    server: dict[str, Any],
    gpu: str | dict[str, Any],
    concurrency: tuple[int, ...] | list[int] = DEFAULT_CONCURRENCY,
) -> PlanResult:
    """Plan one server of a topology. Raises PresetError (a ValueError) on unusable input."""
    return plan(resolve_model(model), load_gpu(gpu), resolve_server(server), concurrency)
