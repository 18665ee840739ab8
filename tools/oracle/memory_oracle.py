"""Run SGLang's own server-argument resolution and KV-pool sizing for a list of cases; print JSON.

    python3 memory_oracle.py < cases.json > results.json

Runs inside the sglang image (real sglang, torch and their dependencies), with node_double making
the process see the node's GPUs. Each case:

    {"id": "...", "model_dir": "/models/llama-3.1-70b", "gpu_mib": 81559,
     "server_args": {"tp_size": 4, "disaggregation_mode": "decode", ...},
     "budgets_gib": [10, 40]}

and each result has what SGLang resolved (mem_fraction_static, chunked_prefill_size, CUDA-graph
batch sizes, page size, KV dtype, max_running_requests, attention backend), the KV pool
configurator's coefficients, and the pool it sizes for each KV budget (what
`_profile_available_bytes` hands to `calculate_pool_sizes`). A case that SGLang itself refuses
gives {"error": "<its exception>"}: that is data too.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import node_double

node_double.install()

GIB = 1 << 30
DSV4_ATTRIBUTES = (
    "kv_bytes",
    "indexer_bytes_per_token",
    "low_ratio_index_bytes",
    "bytes_per_swa_token",
    "bytes_per_full_token",
    "swa_cap_tokens",
    "swa_prefix_tails",
    "swa_ratio",
    "page_size",
    "sliding_window_size",
    "requested_max_running_requests_per_worker",
    "num_layers_total",
)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    return str(value)


def resolve(case: dict[str, Any]) -> dict[str, Any]:
    from sglang.srt.arg_groups.memory_hook import reserve_for_graph_mb
    from sglang.srt.arg_groups.overrides import resolved_view
    from sglang.srt.server_args import ServerArgs

    node_double.set_gpu_mib(int(case["gpu_mib"]))
    args = {"model_path": case["model_dir"], "skip_tokenizer_init": True, **case.get("server_args", {})}
    server_args = ServerArgs(**args)
    server_args.resolve_once()
    view = resolved_view(server_args)
    graphs = view.cuda_graph_config
    resolved = {
        "mem_fraction_static": view.mem_fraction_static,
        "chunked_prefill_size": view.chunked_prefill_size,
        "max_prefill_tokens": view.max_prefill_tokens,
        "max_running_requests": view.max_running_requests,
        "page_size": view.page_size,
        "kv_cache_dtype": view.kv_cache_dtype,
        "attention_backend": view.attention_backend,
        "decode_backend": str(graphs.decode.backend),
        "decode_max_bs": graphs.decode.max_bs,
        "decode_bs": list(graphs.decode.bs or []),
        "prefill_backend": str(graphs.prefill.backend),
        "prefill_max_bs": graphs.prefill.max_bs,
        "prefill_bs": list(graphs.prefill.bs or []),
        "speculative_algorithm": view.speculative_algorithm,
        "speculative_num_draft_tokens": view.speculative_num_draft_tokens,
        "disaggregation_mode": view.disaggregation_mode,
        "context_length": view.context_length,
    }
    with contextlib.suppress(Exception):
        # Post-resolution figure; the resolution itself used it inside the memory hook.
        resolved["graph_reserve_mb"] = reserve_for_graph_mb(server_args)
    return {"server_args": server_args, "resolved": _plain(resolved)}


def kv_pool(server_args: Any, budgets_gib: list[float]) -> dict[str, Any]:
    """Build the KV-cache configurator the way ModelRunner does, and size the pool per budget."""
    from sglang.srt.configs.model_config import AttentionArch, ModelConfig
    from sglang.srt.mem_cache import kv_cache_dtype as kv_dtype_module
    from sglang.srt.mem_cache.kv_cache_configurator import KVCacheConfigurator
    from sglang.srt.model_executor.model_runner_components.layer_setup import resolve_layer_indices
    from sglang.srt.model_executor.model_runner_components.load_model_utils import (
        resolve_sliding_window_size,
    )
    from sglang.srt.model_executor.model_runner_components.spec_aux_hidden_state import (
        resolve_spec_aux_hidden_state_config,
    )
    from sglang.srt.model_executor.pool_configurator import create_memory_pool_configurator
    from sglang.srt.runtime_context import get_context, get_model, get_parallel, get_schedule, get_spec
    from sglang.srt.speculative.spec_info import SpeculativeAlgorithm

    get_context().set_server_args(server_args)
    model_config = ModelConfig.from_server_args(server_args)
    spec = SpeculativeAlgorithm.from_string(get_spec().speculative_algorithm)
    kv_dtype_name, kv_dtype = kv_dtype_module.configure_kv_cache_dtype(
        server_args_kv_cache_dtype=get_model().kv_cache_dtype,
        model=None,
        model_dtype=model_config.dtype,
        is_draft_worker=False,
        is_dflash=spec.is_dflash_family(),
        speculative_draft_attention_backend=None,
        speculative_draft_kv_cache_dtype=get_spec().speculative_draft_kv_cache_dtype,
    )
    layer_info = resolve_layer_indices(model=None, model_config=model_config, is_draft_worker=False)
    # As ModelRunner.init_spec_aux_hidden_state: the draft's KV layers for EAGLE/MTP.
    aux = resolve_spec_aux_hidden_state_config(
        server_args=server_args, model_config=model_config, spec_algorithm=spec, is_draft_worker=False
    )
    configurator = KVCacheConfigurator(
        device="cuda",
        gpu_id=0,
        attn_dp_size=get_parallel().attn_dp_size,
        pp_size=1,
        pp_group=None,
        model=None,
        model_config=model_config,
        server_args=server_args,
        kv_cache_dtype=kv_dtype,
        kv_cache_dtype_str=kv_dtype_name,
        model_dtype=model_config.dtype,
        page_size=get_schedule().page_size,
        sliding_window_size=resolve_sliding_window_size(None, model_config),
        spec_algorithm=spec,
        is_draft_worker=False,
        post_capture_kv_active=False,
        spec_aux_config=aux,
        is_hybrid_swa=model_config.is_hybrid_swa,
        is_hybrid_swa_compress=model_config.is_hybrid_swa_compress,
        use_mla_backend=model_config.attention_arch == AttentionArch.MLA,
        layer_info=layer_info,
        forward_stream=None,
        req_to_token_pool=None,
        token_to_kv_pool_allocator=None,
        memory_pool_config=None,
    )
    pool = create_memory_pool_configurator(configurator)
    out: dict[str, Any] = {
        "configurator": type(pool).__name__,
        "kv_dtype": str(kv_dtype),
        "num_layers": layer_info.num_effective_layers,
        "use_mla": model_config.attention_arch == AttentionArch.MLA,
    }
    if hasattr(pool, "_cell_size"):
        out["cell_bytes"] = pool._cell_size
    if type(pool).__name__ == "DSV4PoolConfigurator":
        out["dsv4"] = {name: _plain(getattr(pool, name, None)) for name in DSV4_ATTRIBUTES}
        out["dsv4"]["spec_inflation"] = pool._spec_infl
        out["dsv4"]["ring_sizes"] = _plain(pool.ring_sizes)
        out["dsv4"]["layers_by_ratio"] = {str(r): len(v) for r, v in pool.stage_owner_layers.items()}
        out["dsv4"]["paged_bytes_by_ratio"] = {
            str(r): pool._get_paged_kv_bytes_per_token(r) for r in (0, 4, 128)
        }
        mrr = pool.requested_max_running_requests_per_worker
        if mrr is not None:
            out["dsv4"]["c128_state_fixed_bytes"] = pool._get_c128_state_fixed_bytes(mrr)
            out["dsv4"]["swa_fixed_bytes"] = pool._get_swa_fixed_bytes()
    pools = []
    for budget in budgets_gib:
        budget_bytes = int(budget * GIB)
        try:
            config = pool.calculate_pool_sizes(budget_bytes, get_schedule().page_size)
        except Exception as exc:  # an upstream refusal is a result
            pools.append({"budget_gib": budget, "error": f"{type(exc).__name__}: {exc}"})
            continue
        pools.append(
            {
                "budget_gib": budget,
                "max_total_num_tokens": config.max_total_num_tokens,
                "swa_max_total_num_tokens": config.swa_max_total_num_tokens,
                "c4_max_total_num_tokens": config.c4_max_total_num_tokens,
                "c128_max_total_num_tokens": config.c128_max_total_num_tokens,
            }
        )
    out["pools"] = pools
    return out


def run_case(case: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"id": case["id"]}
    noise = io.StringIO()
    try:
        with contextlib.redirect_stdout(noise):
            resolution = resolve(case)
            result["resolved"] = resolution["resolved"]
            if case.get("budgets_gib"):
                result["kv"] = kv_pool(resolution["server_args"], case["budgets_gib"])
    except Exception as exc:  # SGLang refusing the arguments is an answer, recorded as such
        result["error"] = f"{type(exc).__name__}: {exc}"
    return result


def main() -> int:
    logging.disable(logging.WARNING)  # SGLang's advisory warnings would drown the JSON on stderr
    cases = json.load(sys.stdin)
    results = [run_case(case) for case in cases]
    json.dump(results, sys.stdout, indent=1, sort_keys=True)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
