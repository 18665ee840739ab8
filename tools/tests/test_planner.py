import itertools
import json
from pathlib import Path

import pytest

from sglnode import planner
from sglnode.cli import main
from sglnode.exitcodes import EXIT_USAGE
from sglnode.planner import (
    PHASE_CUDA_GRAPH,
    PHASE_KV_CACHE,
    PHASE_WEIGHTS,
    ServerSpec,
    expected_distinct_experts,
    kv_cell_bytes,
    plan,
    plan_server,
    pre_load_free_gb,
    resolve_model,
)
from sglnode.presets import (
    BYTES_PER_GB,
    HARDWARE_DIR,
    MODELS_DIR,
    PresetError,
    list_presets,
    load_gpu,
    load_model_preset,
    weights_gb_from_checkpoint,
)

FIXTURES = Path(__file__).parent / "fixtures" / "planner"
QWEN_CONFIG = FIXTURES / "qwen3-32b-config.json"
DSV3_CONFIG = FIXTURES / "deepseek-v3-config.json"
QWEN_CHECKPOINT = FIXTURES / "qwen3-32b-checkpoint"
INTERFACE_KEYS = {
    "fits",
    "failure_phase",
    "reason",
    "gpu",
    "model",
    "tp",
    "dp",
    "ep",
    "mem_fraction_static",
    "weights_per_gpu_gb",
    "kv_pool_gb",
    "kv_tokens",
    "max_concurrent_requests",
    "context_length",
    "headroom_gb",
    "min_mem_fraction_static",
    "roofline",
}
ROOFLINE_KEYS = {"concurrency", "decode_tok_s", "per_request_tok_s", "bytes_per_step_gb"}


# --- Known real cases --------------------------------------------------------------------------
def test_deepseek_v4_pro_on_8x_h200_at_088_leaves_no_kv_room():
    result = plan_server({"preset": "deepseek-v4-pro-fp8"}, {"tp": 8, "mem_fraction_static": 0.88}, "h200")
    assert result.weights_per_gpu_gb == pytest.approx(125.65, abs=0.01)
    assert not result.fits
    assert result.failure_phase == PHASE_KV_CACHE
    assert "Not enough memory" in result.reason
    assert result.kv_tokens == 0
    assert result.min_mem_fraction_static == pytest.approx(0.91, abs=0.01)


def test_deepseek_v4_pro_fits_just_above_its_minimum_fraction():
    minimum = plan_server(
        {"preset": "deepseek-v4-pro-fp8"}, {"tp": 8, "mem_fraction_static": 0.88}, "h200"
    ).min_mem_fraction_static
    assert minimum is not None
    above = plan_server({"preset": "deepseek-v4-pro-fp8"}, {"tp": 8, "mem_fraction_static": minimum}, "h200")
    below = plan_server(
        {"preset": "deepseek-v4-pro-fp8"}, {"tp": 8, "mem_fraction_static": round(minimum - 0.002, 3)}, "h200"
    )
    assert above.fits and above.kv_tokens > 0
    assert below.failure_phase == PHASE_KV_CACHE


def test_flash_fp4_fits_on_tp4_rtx_pro_6000_at_085():
    result = plan_server(
        {"preset": "deepseek-v4-flash-fp4"},
        {"tp": 4, "mem_fraction_static": 0.85, "context_length": 131072},
        "rtx-pro-6000-blackwell",
    )
    assert result.fits, result.reason
    assert result.failure_phase is None
    assert result.weights_per_gpu_gb == pytest.approx(36.5)
    assert result.max_concurrent_requests >= 1


def test_flash_fp4_on_tp1_fails_in_the_weights_phase():
    result = plan_server(
        {"preset": "deepseek-v4-flash-fp4"}, {"tp": 1, "mem_fraction_static": 0.85}, "rtx-pro-6000-blackwell"
    )
    assert not result.fits
    assert result.failure_phase == PHASE_WEIGHTS
    assert result.min_mem_fraction_static is None
    assert "--tp" in result.reason


# --- Formulas ----------------------------------------------------------------------------------
def test_budget_rule_matches_sglang_formula():
    gpu = load_gpu({"name": "g", "memory_gb": 80.6, "bandwidth_tbs": 2.0})
    model = resolve_model({"config": str(QWEN_CONFIG), "weights_gb": 40.0})
    server = ServerSpec(tp=1, mem_fraction_static=0.9, context_length=4096)
    result = plan(model, gpu, server)
    pre = pre_load_free_gb(gpu, 1)
    assert pre == pytest.approx(80.0)
    rest = (pre - 40.0) - pre * (1 - 0.9)  # available_after_load - pre_load * (1 - mfs)
    cell = 8 * (128 + 128) * 64 * 2
    assert result.kv_tokens == int(rest * BYTES_PER_GB // cell)
    assert result.headroom_gb == pytest.approx(pre * (1 - 0.9), abs=0.01)


def test_pre_load_free_memory_drops_when_tp_needs_communicators():
    gpu = load_gpu("h200")
    assert pre_load_free_gb(gpu, 8) < pre_load_free_gb(gpu, 1) < gpu.memory_gb


def test_mha_cell_shards_kv_heads_but_never_below_one_head():
    model = resolve_model({"config": str(QWEN_CONFIG), "weights_gb": 61.0})
    per_head = (128 + 128) * 64 * 2
    assert kv_cell_bytes(model, ServerSpec(tp=1)) == 8 * per_head
    assert kv_cell_bytes(model, ServerSpec(tp=4)) == 2 * per_head
    assert kv_cell_bytes(model, ServerSpec(tp=16)) == 1 * per_head


def test_mla_cell_is_latent_plus_rope_and_not_sharded_by_tp():
    model = resolve_model({"config": str(DSV3_CONFIG), "weights_gb": 642.0})
    assert model.attention == "mla"
    expected = (512 + 64) * 61 * 2
    assert kv_cell_bytes(model, ServerSpec(tp=1)) == expected
    assert kv_cell_bytes(model, ServerSpec(tp=8)) == expected
    assert kv_cell_bytes(model, ServerSpec(tp=8, kv_cache_dtype="fp8_e4m3")) == expected / 2


def test_fp4_kv_dtype_includes_its_scales():
    model = resolve_model({"config": str(QWEN_CONFIG), "weights_gb": 61.0})
    bf16 = kv_cell_bytes(model, ServerSpec())
    assert kv_cell_bytes(model, ServerSpec(kv_cache_dtype="fp4_e2m1")) == pytest.approx(bf16 / 4 + bf16 / 32)


def test_unknown_kv_dtype_is_rejected():
    model = resolve_model({"config": str(QWEN_CONFIG), "weights_gb": 61.0})
    with pytest.raises(PresetError, match="kv-cache-dtype"):
        kv_cell_bytes(model, ServerSpec(kv_cache_dtype="int3"))


def test_speculative_draft_adds_weights_and_kv_layers():
    base = plan_server(
        {"preset": "deepseek-v4-flash-fp4"}, {"tp": 4, "mem_fraction_static": 0.85}, "rtx-pro-6000-blackwell"
    )
    spec = plan_server(
        {"preset": "deepseek-v4-flash-fp4"},
        {
            "tp": 4,
            "mem_fraction_static": 0.85,
            "speculative": {"algorithm": "NEXTN", "draft_weights_gb": 4.0},
        },
        "rtx-pro-6000-blackwell",
    )
    assert spec.weights_per_gpu_gb == pytest.approx(base.weights_per_gpu_gb + 1.0)
    assert spec.kv_cell_bytes == pytest.approx(base.kv_cell_bytes * 44 / 43)
    assert spec.kv_tokens < base.kv_tokens


def test_cuda_graph_phase_fails_when_headroom_is_too_small():
    result = plan_server(
        {"preset": "llama-3.1-70b-instruct"},
        {"tp": 4, "mem_fraction_static": 0.99, "cuda_graph_max_bs_decode": 512},
        "rtx-pro-6000-blackwell",
    )
    assert result.failure_phase == PHASE_CUDA_GRAPH
    assert result.kv_tokens > 0
    assert result.headroom_gb < result.runtime_need_gb


def test_expected_distinct_experts_saturates():
    assert expected_distinct_experts(256, 8, 1) == pytest.approx(8)
    assert expected_distinct_experts(256, 8, 16) < 16 * 8
    assert expected_distinct_experts(256, 8, 4096) == pytest.approx(256, rel=1e-3)
    assert expected_distinct_experts(0, 8, 16) == 0


def test_moe_roofline_bytes_grow_with_batch_then_throughput_rises():
    result = plan_server(
        {"preset": "deepseek-v4-flash-fp4"},
        {"tp": 4, "mem_fraction_static": 0.85},
        "rtx-pro-6000-blackwell",
        concurrency=[1, 16, 64, 256],
    )
    points = result.roofline
    assert [p.concurrency for p in points] == [1, 16, 64, 256]
    assert all(a.bytes_per_step_gb < b.bytes_per_step_gb for a, b in itertools.pairwise(points))
    assert all(a.decode_tok_s < b.decode_tok_s for a, b in itertools.pairwise(points))
    assert all(a.per_request_tok_s > b.per_request_tok_s for a, b in itertools.pairwise(points))
    # One request reads the dense part plus top-k experts per layer: far less than all weights.
    assert points[0].bytes_per_step_gb < result.weights_per_gpu_gb / 4


def test_roofline_scales_with_bandwidth():
    slow = plan_server({"preset": "llama-3.1-70b-instruct"}, {"tp": 8, "mem_fraction_static": 0.85}, "h100")
    fast = plan_server(
        {"preset": "llama-3.1-70b-instruct"},
        {"tp": 8, "mem_fraction_static": 0.85},
        {"preset": "h100", "bandwidth_tbs": 6.7},
    )
    assert fast.roofline[0].per_request_tok_s > slow.roofline[0].per_request_tok_s


def test_roofline_is_capped_by_the_kv_pool():
    result = plan_server(
        {"preset": "llama-3.1-70b-instruct"},
        {"tp": 2, "mem_fraction_static": 0.85},
        "rtx-pro-6000-blackwell",
        concurrency=[4096],
    )
    point = result.roofline[0]
    assert point.limited_by_kv_cache
    assert point.batch_per_replica == result.kv_tokens // result.roofline_context_tokens


def test_dp_multiplies_concurrent_requests():
    one = plan_server(
        {"preset": "llama-3.1-70b-instruct"},
        {"tp": 4, "mem_fraction_static": 0.85, "context_length": 8192},
        "rtx-pro-6000-blackwell",
    )
    two = plan_server(
        {"preset": "llama-3.1-70b-instruct"},
        {"tp": 4, "dp": 2, "mem_fraction_static": 0.85, "context_length": 8192},
        "rtx-pro-6000-blackwell",
    )
    assert two.max_concurrent_requests == 2 * one.max_concurrent_requests > 0


@pytest.mark.parametrize(
    ("server", "match"),
    [
        ({"tp": 2, "ep": 4, "mem_fraction_static": 0.8}, "ep"),
        ({"tp": 2, "mem_fraction_static": 1.2}, "mem_fraction_static"),
        ({"tp": 0, "mem_fraction_static": 0.8}, "tp"),
        ({"tp": 2}, "mem_fraction_static"),
    ],
)
def test_bad_server_input_is_rejected(server, match):
    with pytest.raises(PresetError, match=match):
        plan_server({"preset": "llama-3.1-70b-instruct"}, server, "h100")


# --- Inputs ------------------------------------------------------------------------------------
def test_checkpoint_index_total_size_gives_weights():
    assert weights_gb_from_checkpoint(QWEN_CHECKPOINT) == pytest.approx(65524246528 / 2**30)
    model = resolve_model({"config": str(QWEN_CONFIG), "checkpoint": str(QWEN_CHECKPOINT)})
    assert model.weights_gb == pytest.approx(61.02, abs=0.01)


def test_checkpoint_without_total_size_is_a_clear_error():
    with pytest.raises(PresetError, match="total_size"):
        weights_gb_from_checkpoint(FIXTURES / "no-total-size.index.json")


def test_config_json_fields_are_read():
    model = resolve_model({"config": str(DSV3_CONFIG), "weights_gb": 642.0})
    assert (model.num_hidden_layers, model.n_routed_experts, model.num_experts_per_tok) == (61, 256, 8)
    assert model.expert_bits == 8.0
    assert model.first_k_dense_replace == 3


def test_config_without_weights_is_rejected():
    with pytest.raises(PresetError, match="weights"):
        plan_server({"config": str(QWEN_CONFIG)}, {"tp": 1, "mem_fraction_static": 0.8}, "h100")


def test_unknown_presets_name_the_known_ones():
    with pytest.raises(PresetError, match="rtx-pro-6000-blackwell"):
        load_gpu("no-such-gpu")
    with pytest.raises(PresetError, match="deepseek-v4-flash-fp4"):
        load_model_preset("no-such-model")


@pytest.mark.parametrize("name", list_presets(HARDWARE_DIR))
def test_every_gpu_preset_is_complete(name):
    gpu = load_gpu(name)
    assert gpu.memory_gb > 10 and gpu.bandwidth_tbs > 0.5 and gpu.source.startswith("https://")


@pytest.mark.parametrize("name", list_presets(MODELS_DIR))
def test_every_model_preset_plans(name):
    model = load_model_preset(name)
    assert model.source.startswith("https://")
    assert model.weights_gb > 0 and model.num_hidden_layers > 0
    server = ServerSpec(tp=8, mem_fraction_static=0.95)
    assert planner.kv_cell_bytes(model, server) > 0
    assert planner.expert_bytes_total(model) <= model.weights_gb * BYTES_PER_GB


# --- JSON interface and CLI --------------------------------------------------------------------
def test_json_has_the_interface_keys():
    data = plan_server(
        {"preset": "deepseek-v4-flash-fp4"}, {"tp": 4, "mem_fraction_static": 0.85}, "rtx-pro-6000-blackwell"
    ).to_json()
    assert set(data) >= INTERFACE_KEYS
    assert data["roofline"] and all(set(p) >= ROOFLINE_KEYS for p in data["roofline"])
    assert isinstance(data["kv_tokens"], int) and isinstance(data["fits"], bool)
    json.dumps(data)


def test_cli_json_exit_code_says_does_not_fit(capsys):
    code = main(
        [
            "plan",
            "--model",
            "deepseek-v4-pro-fp8",
            "--gpu",
            "h200",
            "--tp",
            "8",
            "--mem-fraction-static",
            "0.88",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["failure_phase"] == "kv_cache"
    assert data["weights_per_gpu_gb"] == pytest.approx(125.65, abs=0.01)


def test_cli_text_with_config_checkpoint_and_custom_gpu(capsys):
    code = main(
        [
            "plan",
            "--config",
            str(QWEN_CONFIG),
            "--checkpoint",
            str(QWEN_CHECKPOINT),
            "--gpu-mem-gb",
            "80",
            "--gpu-bw-tbs",
            "3.0",
            "--tp",
            "2",
            "--concurrency",
            "1,8",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "FITS" in out and "decode roofline" in out
    assert "30.51 GB per GPU" in out


def test_cli_bad_input_exits_with_the_usage_code(capsys):
    assert main(["plan", "--config", str(QWEN_CONFIG), "--tp", "1"]) == EXIT_USAGE
    assert "weights" in capsys.readouterr().err
    with pytest.raises(SystemExit) as excinfo:
        main(["plan", "--model", "x", "--concurrency", "0"])
    assert excinfo.value.code == EXIT_USAGE
