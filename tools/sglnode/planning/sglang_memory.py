"""The pinned SGLang's memory arithmetic, ported: launch defaults, the memory reserve, KV bytes per token.

Every function here names the upstream function it ports (paths under sglang/srt/ in the pinned
wheel). The port is checked against upstream's own code over a matrix of GPU sizes, TP sizes,
serving modes and speculative decoding (tools/oracle/memory_oracle.py runs the real code in the
image; tools/tests/test_planning_port.py compares). Units follow upstream: GPU memory in MiB as
`nvidia-smi --query-gpu=memory.total` reports it, reserves in MiB, KV sizes in bytes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

MIB = 1 << 20
GIB = 1 << 30

# arg_groups/memory_hook.py handle_gpu_memory_settings: (GPU memory below, in MiB) ->
# (chunked_prefill_size, decode CUDA-graph max bs at tp < 4, at tp >= 4).
CAPACITY_TIERS: tuple[tuple[float, int, int, int], ...] = (
    (20 * 1024, 2048, 8, 8),  # T4, 4080
    (35 * 1024, 4096, 48, 160),  # A10, 4090, 5090
    (60 * 1024, 4096, 32, 160),  # A100 40GB, L40
    (90 * 1024, 8192, 256, 512),  # H100, A100 80GB
    (160 * 1024, 8192, 256, 512),  # H20, H200, RTX PRO 6000
    (math.inf, 16384, 512, 512),  # B200, MI300
)
TP_FOR_LARGE_DECODE_GRAPH = 4
# Activation reserve (memory_hook.py): 512 MiB of constant metadata + 1.5 MiB per activation token
# (at least 2048 tokens) + 1 GiB per 8 ranks, a 10 GiB floor on GPUs over 60 GiB.
RESERVE_BASE_MB = 512
RESERVE_MB_PER_ACTIVATION_TOKEN = 1.5
MIN_ACTIVATION_TOKENS = 2048
RESERVE_MB_PER_RANK = 1024 / 8
RESERVE_FLOOR_MB = 10 * 1024
RESERVE_FLOOR_ABOVE_MB = 60 * 1024
# reserve_for_graph_mb: 2 MiB per decode graph batch size up to max bs; 8 MiB per captured prefill
# size (non-MLA); 1.5 GiB for MLA prefill capture.
DECODE_GRAPH_MB_PER_BS = 2
PREFILL_GRAPH_MB_PER_SIZE = 8
MLA_PREFILL_GRAPH_MB = 1.5 * 1024
MLA_PREFILL_GRAPH_MAX_TOKENS = 8192  # "cap MLA capture at 8192 tokens"
# kv_cache_configurator.py resolve_max_num_reqs: tokens / context_len * 512, clamped to [2048, 4096]
REQS_PER_CONTEXT = 512
MIN_ESTIMATED_REQS = 2048
MAX_ESTIMATED_REQS = 4096
FRACTION_DIGITS = 3  # round(..., 3) in memory_hook.py; ceil(x * 1000) / 1000 in the KV budget error


@dataclass(frozen=True)
class LaunchInputs:
    """What handle_gpu_memory_settings sees: the GPU, the user's flags, and the model's attention."""

    gpu_mib: float
    tp: int = 1
    pp: int = 1
    chunked_prefill_size: int | None = None
    decode_max_bs: int | None = None
    max_running_requests: int | None = None  # only as given on the command line
    max_total_tokens: int | None = None
    disaggregation_mode: str | None = None  # None, "prefill" or "decode"
    speculative_algorithm: str | None = None
    speculative_num_draft_tokens: int | None = None
    use_mla: bool = False
    # Set by upstream's per-model CUDA-graph defaults before the memory hook (e.g. DeepSeek-V4:
    # "Breakable CUDA graph is incompatible with DeepSeek-V4 ...; disabling prefill CUDA graph").
    model_disables_prefill_graph: bool = False
    mem_fraction_static: float | None = None  # given by the user, or None for SGLang's default


@dataclass(frozen=True)
class LaunchDefaults:
    """What SGLang resolves from LaunchInputs (ServerArgs after handle_gpu_memory_settings)."""

    chunked_prefill_size: int
    decode_max_bs: int
    decode_bs: tuple[int, ...]
    decode_graph: bool
    prefill_max_bs: int
    prefill_bs: tuple[int, ...]
    prefill_graph: bool
    graph_reserve_mb: float
    activation_tokens: int
    needed_mb: float  # SGLang's estimate of activations + graphs + metadata, before its 10 GiB floor
    minimal_needed_mb: float  # the same with activations at SGLang's smallest working set (2048 tokens)
    reserved_mb: float  # what the default fraction sets aside: needed_mb, floored
    default_mem_fraction_static: float
    # The largest fraction that still leaves minimal_needed_mb: above it even SGLang's smallest
    # activation estimate and the CUDA graphs cannot fit, so graph capture or prefill runs out of memory.
    max_safe_mem_fraction_static: float
    mem_fraction_static: float  # the one the server runs with: the user's, else the default


def capacity_tier(gpu_mib: float) -> tuple[int, int, int]:
    for below, chunked, small_tp_bs, large_tp_bs in CAPACITY_TIERS:
        if gpu_mib < below:
            return chunked, small_tp_bs, large_tp_bs
    raise AssertionError("the last tier is unbounded")


def decode_graph_batch_sizes(max_bs: int, speculative: bool) -> tuple[int, ...]:
    """arg_groups/cuda_graph_hook.py generate_decode_cuda_graph_batch_sizes (padding on)."""
    if not speculative:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    else:
        sizes = [
            *range(1, 9),
            *range(10, 33, 2),
            *range(40, 65, 4),
            *range(72, 257, 8),
            *range(272, max_bs + 1, 16),
        ]
    sizes = [bs for bs in sizes if bs <= max_bs]
    if max_bs not in sizes:
        sizes.append(max_bs)
    return tuple(sizes)


def prefill_graph_sizes(max_tokens: int) -> tuple[int, ...]:
    """arg_groups/cuda_graph_hook.py generate_prefill_cuda_graph_batch_sizes."""
    sizes = [
        *range(4, 33, 4),
        *range(48, 257, 16),
        *range(288, 513, 32),
        *range(576, 1025, 64),
        *range(1280, 4097, 256),
        *range(4608, max_tokens + 1, 512),
    ]
    return tuple(s for s in sizes if s <= max_tokens)


def fraction_leaving(gpu_mib: float, reserved_mb: float) -> float:
    """memory_hook.py: mem_fraction_static = round((GPU memory - reserve) / GPU memory, 3)."""
    return round((gpu_mib - reserved_mb) / gpu_mib, FRACTION_DIGITS)


def launch_defaults(inputs: LaunchInputs) -> LaunchDefaults:
    """arg_groups/memory_hook.py handle_gpu_memory_settings + reserve_for_graph_mb (dense MoE/attention,
    no DP attention, no DeepEP, no post-capture KV sizing: SGLANG_ENABLE_POST_CAPTURE_KV_SIZING is
    off by default)."""
    tier_chunked, small_tp_bs, large_tp_bs = capacity_tier(inputs.gpu_mib)
    chunked = inputs.chunked_prefill_size if inputs.chunked_prefill_size is not None else tier_chunked
    max_bs = inputs.decode_max_bs
    if max_bs is None:
        max_bs = small_tp_bs if inputs.tp < TP_FOR_LARGE_DECODE_GRAPH else large_tp_bs
        if inputs.max_running_requests is not None and max_bs > inputs.max_running_requests:
            max_bs = inputs.max_running_requests
    speculative = inputs.speculative_algorithm is not None
    decode_bs = decode_graph_batch_sizes(max_bs, speculative)

    prefill_max = min(MLA_PREFILL_GRAPH_MAX_TOKENS, chunked) if inputs.use_mla else chunked
    if inputs.max_total_tokens is not None:
        prefill_max = min(prefill_max, inputs.max_total_tokens)
    prefill_bs = prefill_graph_sizes(prefill_max)

    # cuda_graph_hook.py apply_cuda_graph_disaggregation_roles: a PD prefill server captures no
    # decode graph, a PD decode server no prefill graph.
    decode_graph = inputs.disaggregation_mode != "prefill"
    prefill_graph = inputs.disaggregation_mode != "decode" and not inputs.model_disables_prefill_graph

    graph_mb = 0.0
    if decode_graph:
        graph_mb += max_bs * DECODE_GRAPH_MB_PER_BS
    if prefill_graph:
        graph_mb += MLA_PREFILL_GRAPH_MB if inputs.use_mla else len(prefill_bs) * PREFILL_GRAPH_MB_PER_SIZE

    if inputs.disaggregation_mode == "decode":
        running = inputs.max_running_requests or max_bs or 1
        activation_tokens = max(running * (inputs.speculative_num_draft_tokens or 1), MIN_ACTIVATION_TOKENS)
    else:
        activation_tokens = max(chunked, MIN_ACTIVATION_TOKENS)
    fixed = RESERVE_BASE_MB + inputs.tp * inputs.pp * RESERVE_MB_PER_RANK + graph_mb
    needed = fixed + activation_tokens * RESERVE_MB_PER_ACTIVATION_TOKEN
    minimal_needed = fixed + MIN_ACTIVATION_TOKENS * RESERVE_MB_PER_ACTIVATION_TOKEN
    reserved = max(needed, RESERVE_FLOOR_MB) if inputs.gpu_mib > RESERVE_FLOOR_ABOVE_MB else needed
    default_fraction = fraction_leaving(inputs.gpu_mib, reserved)
    return LaunchDefaults(
        chunked_prefill_size=chunked,
        decode_max_bs=max_bs,
        decode_bs=decode_bs,
        decode_graph=decode_graph,
        prefill_max_bs=prefill_max,
        prefill_bs=prefill_bs,
        prefill_graph=prefill_graph,
        graph_reserve_mb=graph_mb,
        activation_tokens=activation_tokens,
        needed_mb=needed,
        minimal_needed_mb=minimal_needed,
        reserved_mb=reserved,
        default_mem_fraction_static=default_fraction,
        max_safe_mem_fraction_static=fraction_leaving(inputs.gpu_mib, minimal_needed),
        mem_fraction_static=(
            inputs.mem_fraction_static if inputs.mem_fraction_static is not None else default_fraction
        ),
    )


# --- The KV budget ------------------------------------------------------------------------------
@dataclass(frozen=True)
class KVBudget:
    """mem_cache/kv_cache_configurator.py _profile_available_bytes, in GiB as upstream computes it."""

    available_gb: float  # free after the weights (min over ranks)
    pre_model_load_gb: float  # free before the weights
    mem_fraction_static: float

    @property
    def slack_gb(self) -> float:
        return self.pre_model_load_gb * (1 - self.mem_fraction_static)

    @property
    def rest_gb(self) -> float:
        return self.available_gb - self.slack_gb

    @property
    def minimum_mem_fraction_static(self) -> float:
        return 1 - self.available_gb / self.pre_model_load_gb

    @property
    def suggested_mem_fraction_static(self) -> float:
        return math.ceil(self.minimum_mem_fraction_static * 10**FRACTION_DIGITS) / 10**FRACTION_DIGITS

    @property
    def fits(self) -> bool:
        return self.rest_gb > 0

    @property
    def budget_bytes(self) -> int:
        return int(self.rest_gb * GIB)


# --- KV bytes per token -------------------------------------------------------------------------
KV_DTYPE_BYTES: Mapping[str, float] = {
    "bfloat16": 2,
    "bf16": 2,
    "float16": 2,
    "fp16": 2,
    "fp8_e4m3": 1,
    "fp8_e5m2": 1,
    "fp8": 1,
}


@dataclass(frozen=True)
class AttentionShape:
    """The config.json fields SGLang's pool configurators read."""

    family: str  # "mha" (MHA/GQA/MQA), "mla" or "dsv4"
    num_layers: int
    num_kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    kv_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    draft_kv_layers: int = 0  # EAGLE/MTP draft layers sharing the pool (0: none)


def kv_heads_per_rank(total_kv_heads: int, tp: int) -> int:
    """configs/model_config.py get_num_kv_heads: KV heads are sharded, replicated below one per rank."""
    return max(1, total_kv_heads // tp)


def cell_bytes(shape: AttentionShape, tp: int, dtype_bytes: float, speculative: bool) -> int:
    """pool_configurator.py DefaultPoolConfigurator: _compute_cell_size + the EAGLE/MTP draft layers."""
    if shape.family == "mla":
        cell = int((shape.kv_lora_rank + shape.qk_rope_head_dim) * shape.num_layers * dtype_bytes)
    elif shape.family == "mha":
        heads = kv_heads_per_rank(shape.num_kv_heads, tp)
        cell = int(heads * (shape.head_dim + shape.v_head_dim) * shape.num_layers * dtype_bytes)
    else:
        raise ValueError(f"cell_bytes: {shape.family!r} pools are sized by their own configurator")
    if speculative and shape.draft_kv_layers > 0:
        cell += int(cell * shape.draft_kv_layers / shape.num_layers)
    return cell


def default_pool_tokens(budget_bytes: int, cell: int, page_size: int) -> int:
    """pool_configurator.py DefaultPoolConfigurator.calculate_pool_sizes (no KV-shard scratch)."""
    tokens = max(budget_bytes, 0) // cell
    return tokens // page_size * page_size


# --- DeepSeek-V4 compressed-attention pools -----------------------------------------------------
@dataclass(frozen=True)
class DSV4Pool:
    """pool_configurator.py DSV4PoolConfigurator in its default mode on CUDA (paged, not unified_kv,
    SWA sized by --swa-full-tokens-ratio, no HiSparse, no encoder replay, no pipeline parallelism).

    The byte sizes of upstream's page layouts are data (the model preset's `kv_pool`), checked
    against the real configurator by the oracle test; the arithmetic that combines them is here.
    """

    num_layers: int
    layers_by_ratio: Mapping[int, int]  # compress ratio -> layers owning that compressed storage
    paged_bytes_by_ratio: Mapping[int, float]  # ratio (0 = SWA) -> bytes per token of its page layout
    indexer_bytes_per_token: int
    attn_head_dim: int
    indexer_head_dim: int
    compress_state_bytes: int  # element size of the c4 / c128 compress states (fp32)
    ring_sizes: Mapping[int, int]
    ring_sizes_speculative: Mapping[int, int]
    swa_full_tokens_ratio: float
    page_size: int
    draft_layers: int = 1  # an MTP draft reuses one layer's pools: (T + 1) / T

    def rings(self, speculative: bool) -> Mapping[int, int]:
        return self.ring_sizes_speculative if speculative else self.ring_sizes

    def bytes_per_swa_token(self, speculative: bool) -> float:
        """_get_bytes_per_swa_token: SWA KV on every layer + the c4 compress state per SWA slot."""
        c4_state = 2 * 2 * self.attn_head_dim * self.compress_state_bytes
        c4_indexer_state = 2 * 2 * self.indexer_head_dim * self.compress_state_bytes
        c4_state_ratio = self.rings(speculative).get(4, 0) / self.page_size
        return self.paged_bytes_by_ratio[0] * self.num_layers + c4_state_ratio * (
            c4_state + c4_indexer_state
        ) * self.layers_by_ratio.get(4, 0)

    def compressed_bytes_per_full_token(self, ratio: int) -> float:
        """_compressed_bytes_per_full_token for the ratios DeepSeek-V4-Flash uses (4 and 128)."""
        if ratio == 4:
            return self.paged_bytes_by_ratio[4] / 4 + self.indexer_bytes_per_token / 4
        if ratio == 128:
            return self.paged_bytes_by_ratio[128] / 128
        raise ValueError(f"compress ratio {ratio} is not modelled (DeepSeek-V4-Flash uses 4 and 128)")

    def inflation(self, speculative: bool) -> float:
        return (self.num_layers + self.draft_layers) / self.num_layers if speculative else 1.0

    def bytes_per_full_token(self, speculative: bool) -> float:
        """_get_bytes_per_full_token, inflated by (T + D) / T for the MTP draft."""
        per_token = self.swa_full_tokens_ratio * self.bytes_per_swa_token(speculative) + sum(
            self.compressed_bytes_per_full_token(ratio) * layers
            for ratio, layers in self.layers_by_ratio.items()
        )
        # Upstream inflates the swa term and the total separately; the total is what sizes tokens.
        return per_token * self.inflation(speculative)

    def c128_state_fixed_bytes(
        self, max_running_requests: int, speculative: bool, extra_slots: int = 0
    ) -> int:
        """_get_c128_state_fixed_bytes (offline compression): rows padded to 128."""
        layers = self.layers_by_ratio.get(128, 0)
        if layers == 0:
            return 0
        slots = max_running_requests + extra_slots + 1
        ring = self.rings(speculative)[128]
        rows = slots * ring + ring + 1
        rows = -(-rows // 128) * 128
        return rows * 2 * self.attn_head_dim * self.compress_state_bytes * layers

    def pool_tokens(
        self, budget_bytes: int, max_running_requests: int, speculative: bool, extra_slots: int = 0
    ) -> DSV4PoolSizes:
        """calculate_pool_sizes: full tokens after the fixed state, page-aligned, and the SWA pool."""
        fixed = self.c128_state_fixed_bytes(max_running_requests, speculative, extra_slots)
        for_tokens = max(budget_bytes - fixed, 0)
        per_token = self.bytes_per_full_token(speculative)
        full = int(for_tokens / per_token) // self.page_size * self.page_size
        swa = int(full * self.swa_full_tokens_ratio) // self.page_size * self.page_size
        return DSV4PoolSizes(
            full=full,
            swa=swa,
            c4=full // 4,
            c128=full // 128,
            fixed_bytes=fixed,
            bytes_per_full_token=per_token,
        )


@dataclass(frozen=True)
class DSV4PoolSizes:
    full: int
    swa: int
    c4: int
    c128: int
    fixed_bytes: int
    bytes_per_full_token: float
    notes: tuple[str, ...] = field(default=())


def estimated_max_running_requests(tokens: int, context_len: int, requested: int | None) -> int:
    """kv_cache_configurator.py resolve_max_num_reqs (no DP attention, no Mamba state)."""
    if requested is not None:
        return min(max(1, requested), tokens // 2)
    estimated = int(tokens / context_len * REQS_PER_CONTEXT)
    estimated = max(min(estimated, MAX_ESTIMATED_REQS), MIN_ESTIMATED_REQS)
    return min(estimated, tokens // 2)
