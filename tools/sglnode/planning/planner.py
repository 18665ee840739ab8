"""Will it fit, and how fast can it be? The pinned SGLang's own memory budget, and a decode roofline.

The arithmetic is SGLang's, ported in `sglang_memory` and checked against upstream's code run on
the node double (see that module): the launch defaults (`--mem-fraction-static`,
`--chunked-prefill-size`, the decode CUDA-graph batch sizes) and the reserve behind the default
fraction, the KV budget `_profile_available_bytes`:

    rest = available_after_weights - pre_model_load * (1 - mem_fraction_static)
    if rest <= 0: ValueError("Loaded weights leave no GPU memory for the KV cache under ...")

and the pool the configurator sizes from `rest` (bytes per token for MHA/GQA and MLA; DeepSeek-V4's
compressed pools). Two inputs are estimates, not SGLang's: the memory free before the weights load
(`pre_model_load`: the GPU minus the CUDA context and NCCL buffers) and the weights per GPU (the
checkpoint split over TP, plus the speculative draft's). They are named as estimates in the output.

Units: "GB" is 2**30 bytes, as in SGLang's log lines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any

from sglnode.planning.presets import (
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
from sglnode.planning.sglang_memory import (
    KV_DTYPE_BYTES,
    KVBudget,
    LaunchDefaults,
    LaunchInputs,
    cell_bytes,
    default_pool_tokens,
    estimated_max_running_requests,
    launch_defaults,
)
from sglnode.topology.model import Server
from sglnode.upstream import catalog

# --- Estimates (not SGLang's arithmetic), each with its basis -----------------------------------
# Memory gone before weights load: the CUDA context (~0.5 GB on Hopper/Blackwell with lazy module
# loading) plus, with TP > 1, NCCL communicators. Chosen so the known DeepSeek-V4-Pro on 8x H200
# case lands on its observed minimum fraction (~0.91).
CUDA_CONTEXT_GB = 0.6
TP_COMMUNICATOR_GB = 0.9
# Fraction of peak memory bandwidth a decode step reaches (weight-streaming GEMV/grouped GEMM).
ACHIEVABLE_BANDWIDTH_FRACTION = 0.8
# Two TP all-reduces per transformer layer in decode (after attention, after the MLP/MoE).
ALLREDUCES_PER_LAYER = 2
# Tokens of context each running request has on average during the roofline's decode steps.
DEFAULT_ROOFLINE_CONTEXT_TOKENS = 2048
DEFAULT_CONCURRENCY = (1, 16, 64)
MIB_PER_GB = 1024

PHASE_WEIGHTS = "weights"
PHASE_KV_CACHE = "kv_cache"
PHASE_CUDA_GRAPH = "cuda_graph"
RISK_ABOVE_DEFAULT = "mem_fraction_above_sglang_default"
RISK_POOL_SHORT = "kv_pool_below_one_context"
ROLE_TO_DISAGGREGATION = {"regular": None, "prefill": "prefill", "decode": "decode"}
KV_BUDGET_ERROR = catalog.get("kv_budget_no_memory")
DSV4_SPECULATIVE_REFUSAL = catalog.get("dsv4_speculative_algorithms")


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


@dataclass(frozen=True)
class Risk:
    """Something that fits on paper but that SGLang's own defaults would not do."""

    code: str
    message: str
    numbers: dict[str, float]

    def to_json(self) -> dict[str, Any]:
        return {"code": self.code, "message": self.message, "numbers": self.numbers}


@dataclass
class PlanResult:
    fits: bool
    failure_phase: str | None
    reason: str
    gpu: GpuSpec
    model: ModelSpec
    server: Server
    sglang: LaunchDefaults
    mem_fraction_source: str  # "sglang default" or "explicit"
    context_length: int
    kv_cache_dtype: str
    page_size: int
    pre_load_free_gb: float
    weights_per_gpu_gb: float
    kv_cell_bytes: float
    kv_budget_gb: float
    kv_pool_gb: float
    kv_tokens: int
    max_running_requests: int
    max_concurrent_requests: int
    headroom_gb: float
    reserve_estimate_gb: float
    min_mem_fraction_static: float | None
    risks: list[Risk] = field(default_factory=list)
    roofline: list[RooflinePoint] = field(default_factory=list)
    roofline_context_tokens: int = DEFAULT_ROOFLINE_CONTEXT_TOKENS

    @property
    def mem_fraction_static(self) -> float:
        return self.sglang.mem_fraction_static

    @property
    def avail_after_weights_gb(self) -> float:
        return self.pre_load_free_gb - self.weights_per_gpu_gb

    def to_json(self) -> dict[str, Any]:
        """The documented, stable JSON of `sglnode plan --json` (other tools read these keys)."""
        defaults = self.sglang
        return {
            "fits": self.fits,
            "failure_phase": self.failure_phase,
            "reason": self.reason,
            "risks": [risk.to_json() for risk in self.risks],
            "gpu": self.gpu.to_json(),
            "model": self.model.name,
            "tp": self.server.tp,
            "dp": self.server.dp,
            "ep": self.server.ep or 1,
            "role": self.server.role,
            "mem_fraction_static": self.mem_fraction_static,
            "mem_fraction_source": self.mem_fraction_source,
            "sglang_defaults": {
                "sglang_version": catalog.load_version(),
                "mem_fraction_static": defaults.default_mem_fraction_static,
                "max_safe_mem_fraction_static": defaults.max_safe_mem_fraction_static,
                "reserved_mb": round(defaults.reserved_mb, 1),
                "needed_mb": round(defaults.needed_mb, 1),
                "minimal_needed_mb": round(defaults.minimal_needed_mb, 1),
                "graph_reserve_mb": round(defaults.graph_reserve_mb, 1),
                "activation_tokens": defaults.activation_tokens,
                "chunked_prefill_size": defaults.chunked_prefill_size,
                "cuda_graph_max_bs_decode": defaults.decode_max_bs,
                "decode_graph": defaults.decode_graph,
                "prefill_graph": defaults.prefill_graph,
            },
            "kv_cache_dtype": self.kv_cache_dtype,
            "page_size": self.page_size,
            "weights_per_gpu_gb": round(self.weights_per_gpu_gb, 3),
            "pre_load_free_gb": round(self.pre_load_free_gb, 3),
            "estimates": ["pre_load_free_gb", "weights_per_gpu_gb", "roofline"],
            "kv_cell_bytes_per_token": round(self.kv_cell_bytes, 2),
            "kv_budget_gb": round(self.kv_budget_gb, 3),
            "kv_pool_gb": round(self.kv_pool_gb, 3),
            "kv_tokens": self.kv_tokens,
            "max_running_requests": self.max_running_requests,
            "max_concurrent_requests": self.max_concurrent_requests,
            "context_length": self.context_length,
            "headroom_gb": round(self.headroom_gb, 3),
            "reserve_estimate_gb": round(self.reserve_estimate_gb, 3),
            "min_mem_fraction_static": self.min_mem_fraction_static,
            "roofline_context_tokens": self.roofline_context_tokens,
            "roofline": [point.to_json() for point in self.roofline],
            "simulated_estimate": True,
        }


# --- Memory model -------------------------------------------------------------------------------
def pre_load_free_gb(gpu: GpuSpec, tp: int) -> float:
    """Free memory on each GPU just before weights load (SGLang's `pre_model_load_memory`): an estimate."""
    return gpu.memory_gb - CUDA_CONTEXT_GB - (TP_COMMUNICATOR_GB if tp > 1 else 0.0)


def speculative_algorithm(server: Server) -> str | None:
    return server.speculative.algorithm if server.speculative and server.speculative.algorithm else None


def draft_weights_gb(model: ModelSpec, server: Server) -> float:
    """Weights the speculative draft worker loads on top of the target (0 without speculation)."""
    if not speculative_algorithm(server):
        return 0.0
    if model.draft_weights_gb:
        return model.draft_weights_gb
    # MTP drafts load the checkpoint's nextn layer(s): about one decoder layer each.
    return model.weights_gb / max(model.num_hidden_layers, 1) * max(model.num_nextn_predict_layers, 1)


def weights_per_gpu_gb(model: ModelSpec, server: Server) -> float:
    # Attention/dense weights are TP-sharded and experts are split over the EP group inside the
    # same TP ranks (SGLang requires ep_size <= tp_size), so each GPU holds 1/tp of the total.
    return (model.weights_gb + draft_weights_gb(model, server)) / server.tp


def resolved_kv_dtype(model: ModelSpec, server: Server) -> str:
    """--kv-cache-dtype auto is the model's SGLang default (its preset), else the given dtype."""
    given = server.kv_cache_dtype
    return model.sglang.kv_cache_dtype if given in (None, "auto") else str(given)


def kv_dtype_bytes(dtype: str) -> float:
    try:
        return KV_DTYPE_BYTES[dtype]
    except KeyError as exc:
        known = ", ".join(["auto", *KV_DTYPE_BYTES])
        raise PresetError(f"--kv-cache-dtype {dtype!r} is not modelled; known: {known}") from exc


def launch_inputs(model: ModelSpec, gpu: GpuSpec, server: Server) -> LaunchInputs:
    args = server.args
    spec = server.speculative
    return LaunchInputs(
        gpu_mib=gpu.memory_mib,
        tp=server.tp,
        chunked_prefill_size=server.chunked_prefill_size,
        decode_max_bs=server.cuda_graph_max_bs_decode,
        max_running_requests=_int_arg(args, "max_running_requests"),
        max_total_tokens=_int_arg(args, "max_total_tokens"),
        disaggregation_mode=ROLE_TO_DISAGGREGATION.get(server.role),
        speculative_algorithm=speculative_algorithm(server),
        speculative_num_draft_tokens=spec.num_draft_tokens if spec else None,
        use_mla=model.attention == "mla",
        model_disables_prefill_graph=not model.sglang.prefill_cuda_graph,
        mem_fraction_static=server.mem_fraction_static,
    )


def _int_arg(args: dict[str, Any], key: str) -> int | None:
    value = args.get(key, args.get(key.replace("_", "-")))
    return int(value) if value is not None else None


def tp_problems(model: ModelSpec, tp: int) -> list[str]:
    """Why the pinned SGLang refuses this TP size for the model's attention heads (empty: it accepts it).

    Query heads are split evenly over TP ranks: `ColumnParallelLinear` and `QKVParallelLinear` call
    `divide(total_num_heads, tp_size)`, which asserts `numerator % denominator == 0`
    (srt/layers/linear.py:1139, srt/distributed/utils.py:68-79; Llama's attention asserts it directly,
    srt/models/llama.py:183; DeepSeek-V2/V3 MLA, srt/models/deepseek_v2.py:2057). Per-head K/V
    (MHA/GQA) are partitioned when there are at least as many as ranks, else replicated:
    `divide(total_num_kv_heads, tp_size)` or `divide(tp_size, total_num_kv_heads)`
    (srt/layers/linear.py:1140-1145, srt/models/llama.py:186-193). MLA and DeepSeek-V4 keep one
    latent KV head replicated on every rank, so only the query heads constrain TP there.
    """
    if tp < 1:
        return []
    problems = []
    heads = model.num_attention_heads
    if heads % tp:
        problems.append(
            f"tp {tp} does not divide {model.name}'s {heads} attention heads: SGLang "
            f"{catalog.load_version()} splits heads evenly over TP ranks (num_heads % tp_size == 0; "
            f"srt/layers/linear.py:1139); use a TP size that divides {heads}"
        )
    kv_heads = model.num_key_value_heads
    if model.attention == "mha" and kv_heads % tp and tp % kv_heads:
        problems.append(
            f"tp {tp} and {model.name}'s {kv_heads} KV heads: SGLang {catalog.load_version()} needs the "
            "KV heads divisible by tp (partitioned) or tp divisible by them (replicated) "
            "(srt/layers/linear.py:1140-1145)"
        )
    return problems


def _validate(model: ModelSpec, server: Server) -> None:
    if server.tp < 1 or server.dp < 1 or (server.ep or 1) < 1:
        raise PresetError("tp, dp and ep must be >= 1")
    refused = tp_problems(model, server.tp)
    if refused:
        raise PresetError("; ".join(refused))
    if (server.ep or 1) > server.tp:
        raise PresetError(f"ep ({server.ep}) must not exceed tp ({server.tp}) in SGLang")
    fraction = server.mem_fraction_static
    if fraction is not None and not 0 < fraction < 1:
        raise PresetError(f"mem_fraction_static must be in (0, 1), got {fraction}")
    if model.weights_gb <= 0:
        raise PresetError("model weights unknown: give --weights-gb or --checkpoint")
    algorithm = speculative_algorithm(server)
    allowed = model.sglang.speculative_algorithms
    if algorithm and allowed and algorithm not in allowed:
        refusal = (
            DSV4_SPECULATIVE_REFUSAL.render(model_arch=model.architecture)
            if model.attention == "dsv4"
            else f"it accepts {', '.join(allowed)} for {model.architecture or model.name}"
        )
        raise PresetError(
            f"SGLang {catalog.load_version()} refuses --speculative-algorithm {algorithm}: {refusal}"
        )


def _kv_pool(
    model: ModelSpec, server: Server, budget_bytes: int, dtype: str, requests: int | None
) -> tuple[int, float, float]:
    """(tokens, pool GB, bytes per token) the configurator sizes from the budget."""
    speculative = speculative_algorithm(server) is not None
    if model.attention == "dsv4":
        pool = model.dsv4_pool()
        mrr = requests if requests is not None else model.sglang.max_running_requests or 256
        sizes = pool.pool_tokens(budget_bytes, mrr, speculative)
        pool_gb = (sizes.full * sizes.bytes_per_full_token + sizes.fixed_bytes) / BYTES_PER_GB
        return sizes.full, pool_gb, sizes.bytes_per_full_token
    cell = cell_bytes(model.attention_shape(), server.tp, kv_dtype_bytes(dtype), speculative)
    tokens = default_pool_tokens(budget_bytes, cell, model.sglang.page_size)
    return tokens, tokens * cell / BYTES_PER_GB, float(cell)


def plan(
    model: ModelSpec,
    gpu: GpuSpec,
    server: Server,
    concurrency: tuple[int, ...] | list[int] = DEFAULT_CONCURRENCY,
    roofline_context_tokens: int = DEFAULT_ROOFLINE_CONTEXT_TOKENS,
) -> PlanResult:
    _validate(model, server)
    defaults = launch_defaults(launch_inputs(model, gpu, server))
    fraction = defaults.mem_fraction_static
    context = server.context_length or model.max_position_embeddings or roofline_context_tokens
    dtype = resolved_kv_dtype(model, server)
    if model.attention != "dsv4":
        kv_dtype_bytes(dtype)  # an unknown dtype is bad input, refused before anything is planned
    pre = pre_load_free_gb(gpu, server.tp)
    weights = weights_per_gpu_gb(model, server)
    budget = KVBudget(available_gb=pre - weights, pre_model_load_gb=pre, mem_fraction_static=fraction)
    # SGLang defines the fraction against the whole card: (1 - fraction) of it is what activations
    # and CUDA graphs get, against its own estimate of their need (its reserve before the floor).
    reserve_gb = defaults.needed_mb / MIB_PER_GB
    headroom = gpu.memory_gb * (1 - fraction)
    requested_mrr = _int_arg(server.args, "max_running_requests") or model.sglang.max_running_requests
    result = PlanResult(
        fits=False,
        failure_phase=None,
        reason="",
        gpu=gpu,
        model=model,
        server=server,
        sglang=defaults,
        mem_fraction_source="explicit" if server.mem_fraction_static is not None else "sglang default",
        context_length=context,
        kv_cache_dtype=dtype,
        page_size=model.sglang.page_size,
        pre_load_free_gb=pre,
        weights_per_gpu_gb=weights,
        kv_cell_bytes=0.0,
        kv_budget_gb=max(budget.rest_gb, 0.0),
        kv_pool_gb=0.0,
        kv_tokens=0,
        max_running_requests=0,
        max_concurrent_requests=0,
        headroom_gb=headroom,
        reserve_estimate_gb=reserve_gb,
        min_mem_fraction_static=budget.suggested_mem_fraction_static if weights < pre else None,
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
    if not budget.fits:
        result.failure_phase = PHASE_KV_CACHE
        result.reason = KV_BUDGET_ERROR.render(
            mem_fraction_static=fraction,
            suggested_mem_fraction_static=budget.suggested_mem_fraction_static,
            minimum_mem_fraction_static=budget.minimum_mem_fraction_static,
        ) + (
            f" [rest = {budget.available_gb:.2f} - {pre:.2f} x (1 - {fraction}) = {budget.rest_gb:.2f} GB; "
            f"the fraction is {result.mem_fraction_source}]"
        )
        return result
    tokens, pool_gb, per_token = _kv_pool(model, server, budget.budget_bytes, dtype, requested_mrr)
    result.kv_tokens = tokens
    result.kv_pool_gb = pool_gb
    result.kv_cell_bytes = per_token
    result.max_running_requests = (
        estimated_max_running_requests(tokens, context, requested_mrr) if tokens else 0
    )
    result.max_concurrent_requests = (tokens // context) * server.dp
    capacity = tokens // max(roofline_context_tokens, 1)
    result.roofline = [
        roofline_point(
            model,
            gpu,
            server,
            concurrency=c,
            context_tokens=roofline_context_tokens,
            capacity_per_replica=capacity,
            kv_bytes_per_token=per_token,
        )
        for c in concurrency
    ]
    if tokens <= 0:
        # The configurator sizes nothing (DeepSeek-V4's fixed compress state can exceed a small
        # budget): MemoryPoolConfig.__post_init__ raises, without the fraction in its message.
        result.failure_phase = PHASE_KV_CACHE
        result.reason = (
            f"{catalog.get('not_enough_memory').text} [a {budget.rest_gb:.2f} GB KV budget sizes no pool: "
            f"{model.name} needs more than its fixed per-request state]"
        )
        return result
    if fraction > defaults.max_safe_mem_fraction_static:
        result.failure_phase = PHASE_CUDA_GRAPH
        minimal_gb = defaults.minimal_needed_mb / MIB_PER_GB
        result.reason = (
            f"--mem-fraction-static {fraction} leaves {headroom:.2f} GB per GPU outside weights and KV, "
            f"below the {minimal_gb:.2f} GB SGLang {catalog.load_version()} reserves for CUDA graphs "
            f"(decode max bs {defaults.decode_max_bs}) and its smallest activation working set "
            f"(it reserves {reserve_gb:.2f} GB for {defaults.activation_tokens} tokens): graph capture or "
            f"the first prefill would run out of memory. At most {defaults.max_safe_mem_fraction_static}; "
            f"SGLang's own default here is {defaults.default_mem_fraction_static}"
        )
        return result
    if server.mem_fraction_static is not None and fraction > defaults.default_mem_fraction_static:
        result.risks.append(
            Risk(
                RISK_ABOVE_DEFAULT,
                f"--mem-fraction-static {fraction} is above SGLang {catalog.load_version()}'s own default "
                f"{defaults.default_mem_fraction_static} for this GPU and TP: it leaves {headroom:.2f} GB "
                f"where SGLang would keep {defaults.reserved_mb / MIB_PER_GB:.2f} GB (its 10 GiB floor on "
                "cards over 60 GB included); long prefills or new graph sizes may run out of memory while "
                "serving",
                {
                    "mem_fraction_static": fraction,
                    "sglang_default": defaults.default_mem_fraction_static,
                    "headroom_gb": round(headroom, 3),
                    "sglang_reserved_gb": round(defaults.reserved_mb / MIB_PER_GB, 3),
                },
            )
        )
    if tokens < context:
        result.risks.append(
            Risk(
                RISK_POOL_SHORT,
                f"the KV pool holds {tokens} tokens, fewer than one {context}-token context",
                {"kv_tokens": tokens, "context_length": context},
            )
        )
    result.fits = True
    result.reason = (
        f"{weights:.2f} GB weights + {pool_gb:.2f} GB KV ({tokens} tokens) per GPU at "
        f"--mem-fraction-static {fraction} ({result.mem_fraction_source}), {headroom:.2f} GB headroom"
    )
    return result


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


def decode_bytes_per_gpu(
    model: ModelSpec, server: Server, batch: int, context_tokens: int, kv_bytes_per_token: float
) -> float:
    experts = expert_bytes_total(model)
    dense = model.weights_gb * BYTES_PER_GB - experts
    hit_fraction = (
        expected_distinct_experts(model.n_routed_experts, model.num_experts_per_tok, batch)
        / model.n_routed_experts
        if model.is_moe
        else 0.0
    )
    # Upper bound: every cached byte of each request's context is read once per step (sparse and
    # compressed attention read less).
    kv_read = batch * context_tokens * kv_bytes_per_token
    return (dense + experts * hit_fraction) / server.tp + kv_read


def roofline_point(
    model: ModelSpec,
    gpu: GpuSpec,
    server: Server,
    *,
    concurrency: int,
    context_tokens: int,
    capacity_per_replica: int,
    kv_bytes_per_token: float,
) -> RooflinePoint:
    batch = math.ceil(concurrency / server.dp)
    limited = capacity_per_replica > 0 and batch > capacity_per_replica
    if limited:
        batch = capacity_per_replica
    batch = max(batch, 1)
    step_bytes = decode_bytes_per_gpu(model, server, batch, context_tokens, kv_bytes_per_token)
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


# --- Model lookup -------------------------------------------------------------------------------
def resolve_model(
    preset: str | None = None,
    config: str | dict[str, Any] | None = None,
    weights_gb: float | None = None,
    checkpoint: str | None = None,
) -> ModelSpec:
    """A model by preset name, or from a config.json (path or dict) with its weight size."""
    weights = weights_gb
    if weights is None and checkpoint:
        weights = weights_gb_from_checkpoint(checkpoint)
    if preset:
        spec = load_model_preset(preset)
        return replace(spec, weights_gb=float(weights)) if weights is not None else spec
    if config:
        data = config if isinstance(config, dict) else load_config_json(config)
        name = "config" if isinstance(config, dict) else str(config)
        return model_from_config(data, weights_gb=float(weights or 0.0), name=name)
    raise PresetError("model needs a preset or a config (config.json path or dict)")


def plan_server(
    model: ModelSpec,
    server: Server,
    gpu: str | dict[str, Any] | GpuSpec,
    concurrency: tuple[int, ...] | list[int] = DEFAULT_CONCURRENCY,
) -> PlanResult:
    """Plan one server of a topology. Raises PresetError (a ValueError) on unusable input."""
    return plan(model, load_gpu(gpu), server, concurrency)
