"""The planner: SGLang's budget rule with the planner's estimates, its verdicts, JSON and CLI.

The arithmetic ported from SGLang is checked against upstream's own code in test_planning_port.py;
this file checks what the planner makes of it (phases, risks, refusals, the interface).
"""

import itertools
import json
from dataclasses import replace
from pathlib import Path

import pytest

import sglnode.planning.presets as presets
from sglnode.cli import main
from sglnode.exitcodes import EXIT_USAGE
from sglnode.pins import PINS
from sglnode.planning.planner import (
    PHASE_CUDA_GRAPH,
    PHASE_KV_CACHE,
    PHASE_WEIGHTS,
    RISK_ABOVE_DEFAULT,
    expected_distinct_experts,
    expert_bytes_total,
    plan,
    plan_server,
    pre_load_free_gb,
    resolve_model,
)
from sglnode.planning.presets import (
    BYTES_PER_GB,
    HARDWARE_DIR,
    MODELS_DIR,
    PresetError,
    list_presets,
    load_gpu,
    load_model_preset,
    weights_gb_from_checkpoint,
)
from sglnode.topology.model import Server, Speculative

FIXTURES = Path(__file__).parent / "fixtures" / "planner"
QWEN_CONFIG = FIXTURES / "qwen3-32b-config.json"
DSV3_CONFIG = FIXTURES / "deepseek-v3-config.json"
QWEN_CHECKPOINT = FIXTURES / "qwen3-32b-checkpoint"
RTX = "rtx-pro-6000-blackwell"
INTERFACE_KEYS = {
    "fits",
    "failure_phase",
    "reason",
    "risks",
    "gpu",
    "model",
    "tp",
    "dp",
    "ep",
    "mem_fraction_static",
    "mem_fraction_source",
    "sglang_defaults",
    "weights_per_gpu_gb",
    "kv_pool_gb",
    "kv_tokens",
    "max_running_requests",
    "max_concurrent_requests",
    "context_length",
    "headroom_gb",
    "min_mem_fraction_static",
    "roofline",
}
ROOFLINE_KEYS = {"concurrency", "decode_tok_s", "per_request_tok_s", "bytes_per_step_gb"}
MTP = Speculative(algorithm="EAGLE", num_steps=3, eagle_topk=1, num_draft_tokens=4, draft_model_path=None)


def flash() -> object:
    return resolve_model(preset="deepseek-v4-flash-fp4")


# --- Known real cases --------------------------------------------------------------------------
def test_the_0_5_23_kv_budget_message_and_numbers_from_the_field():
    # Issue 10's real message from the pinned release: TP4 RTX PRO 6000 at 0.35 -> "above 0.388 ... = 0.3879".
    result = plan_server(flash(), Server("s", tp=4, mem_fraction_static=0.35), RTX)
    assert result.failure_phase == PHASE_KV_CACHE
    assert result.reason.startswith(
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.35. "
        "Raise --mem-fraction-static above 0.388 (minimum viable = 1 - available/pre = 0.3879)."
    )
    assert result.min_mem_fraction_static == 0.388


def test_deepseek_v4_pro_on_8x_h200_at_088_leaves_no_kv_room():
    pro = resolve_model(preset="deepseek-v4-pro-fp8")
    result = plan_server(pro, Server("s", tp=8, mem_fraction_static=0.88), "h200")
    assert result.weights_per_gpu_gb == pytest.approx(125.65, abs=0.01)
    assert result.failure_phase == PHASE_KV_CACHE
    assert result.kv_tokens == 0
    assert result.min_mem_fraction_static == pytest.approx(0.91, abs=0.01)
    # At SGLang's own "Raise ... above" figure the budget is positive, but DeepSeek-V4's fixed c128
    # compress state (2.5 GB for 256 requests) still leaves no pool: the pinned release's other KV message.
    at_minimum = Server("s", tp=8, mem_fraction_static=result.min_mem_fraction_static)
    minimum = plan_server(pro, at_minimum, "h200")
    assert minimum.failure_phase == PHASE_KV_CACHE
    assert minimum.reason.startswith("Not enough memory. Please try to increase --mem-fraction-static.")
    assert plan_server(pro, Server("s", tp=8, mem_fraction_static=0.94), "h200").kv_tokens > 0


def test_without_a_fraction_the_plan_uses_sglangs_own_default():
    result = plan_server(flash(), Server("s", tp=4), RTX)
    assert result.mem_fraction_source == "sglang default"
    # memory_hook.py on 97887 MiB at TP4: 512 + 8192 x 1.5 + 512 + 512 x 2 (decode graphs; DeepSeek-V4
    # disables prefill capture) = 14336 MiB reserved -> round(83551 / 97887, 3) = 0.854.
    assert result.sglang.reserved_mb == 14336
    assert result.mem_fraction_static == 0.854
    assert result.fits, result.reason


def test_the_old_fits_at_097_is_refused_now():
    # Issue 10: the old planner said FITS at 0.97 where SGLang's default is below 0.90.
    result = plan_server(flash(), Server("s", tp=4, mem_fraction_static=0.97), RTX)
    assert not result.fits
    assert result.failure_phase == PHASE_CUDA_GRAPH
    # It leaves 2.87 GB; SGLang reserves 5.00 GB for decode graphs and its smallest activation set.
    assert "0.854" in result.reason and "5.00 GB" in result.reason and "2.87 GB" in result.reason


def test_field_campaign_fraction_fits_with_no_risk():
    result = plan_server(flash(), Server("s", tp=4, mem_fraction_static=0.85), RTX)
    assert result.fits and not result.risks
    assert result.weights_per_gpu_gb == pytest.approx(36.5)


@pytest.mark.parametrize(
    ("server", "default"),
    [
        # A PD decode server: SGLang's 10 GiB floor dominates its reserve (it needs ~5 GB).
        (Server("d", role="decode", tp=4, mem_fraction_static=0.92), 0.895),
        # Above the default, short of SGLang's 14 GB activation estimate, above its 2048-token minimum.
        (Server("r", tp=4, mem_fraction_static=0.9), 0.854),
    ],
)
def test_above_the_default_but_within_the_reserve_is_a_risk_with_numbers(server, default):
    result = plan_server(flash(), server, RTX)
    assert result.sglang.default_mem_fraction_static == default
    assert result.fits
    (risk,) = result.risks
    assert risk.code == RISK_ABOVE_DEFAULT
    assert risk.numbers["sglang_default"] == default
    assert risk.numbers["mem_fraction_static"] == server.mem_fraction_static
    assert result.to_json()["risks"][0]["code"] == RISK_ABOVE_DEFAULT


def test_flash_fp4_on_tp1_fails_in_the_weights_phase():
    result = plan_server(flash(), Server("s", tp=1, mem_fraction_static=0.85), RTX)
    assert result.failure_phase == PHASE_WEIGHTS
    assert result.min_mem_fraction_static is None
    assert "--tp" in result.reason


def test_dsv4_pool_is_sized_by_its_configurator_not_a_flat_per_token_figure():
    result = plan_server(flash(), Server("s", tp=4, mem_fraction_static=0.85), RTX)
    assert result.page_size == 256 and result.kv_tokens % 256 == 0
    assert result.kv_cell_bytes == pytest.approx(7086.75)
    assert result.kv_cache_dtype == "fp8_e4m3"
    assert result.max_running_requests == 256  # DeepseekV4ForCausalLM's default in the pinned release


def test_mtp_on_deepseek_v4_needs_eagle_as_sglang_says():
    with pytest.raises(PresetError, match="Only EAGLE and DSPARK speculative algorithms are supported"):
        plan_server(flash(), Server("s", tp=4, speculative=replace(MTP, algorithm="NEXTN")), RTX)
    base = plan_server(flash(), Server("s", tp=4, mem_fraction_static=0.85), RTX)
    spec = plan_server(flash(), Server("s", tp=4, mem_fraction_static=0.85, speculative=MTP), RTX)
    assert spec.weights_per_gpu_gb > base.weights_per_gpu_gb
    assert spec.kv_cell_bytes > base.kv_cell_bytes * 44 / 43  # (T+1)/T and doubled compress rings
    assert spec.kv_tokens < base.kv_tokens


# --- Formulas ----------------------------------------------------------------------------------
def test_budget_rule_matches_sglang_formula():
    gpu = load_gpu({"name": "g", "memory_gb": 80.6, "bandwidth_tbs": 2.0})
    model = resolve_model(config=str(QWEN_CONFIG), weights_gb=40.0)
    result = plan(model, gpu, Server("s", mem_fraction_static=0.9, context_length=4096))
    pre = pre_load_free_gb(gpu, 1)
    assert pre == pytest.approx(80.0)
    rest = (pre - 40.0) - pre * (1 - 0.9)  # available_after_load - pre_load * (1 - mfs)
    cell = 8 * (128 + 128) * 64 * 2
    assert result.kv_tokens == int(rest * BYTES_PER_GB) // cell
    assert result.kv_budget_gb == pytest.approx(rest)


def test_pre_load_free_memory_drops_when_tp_needs_communicators():
    gpu = load_gpu("h200")
    assert pre_load_free_gb(gpu, 8) < pre_load_free_gb(gpu, 1) < gpu.memory_gb


@pytest.mark.parametrize(("tp", "heads"), [(1, 8), (4, 2), (16, 1)])
def test_mha_cell_shards_kv_heads_but_never_below_one_head(tp, heads):
    model = resolve_model(config=str(QWEN_CONFIG), weights_gb=1.0)
    result = plan(model, load_gpu("b200"), Server("s", tp=tp, mem_fraction_static=0.9))
    assert result.kv_cell_bytes == heads * (128 + 128) * 64 * 2


def test_mla_cell_is_latent_plus_rope_and_not_sharded_by_tp():
    model = resolve_model(config=str(DSV3_CONFIG), weights_gb=100.0)
    assert model.attention == "mla"
    for tp in (1, 8):
        result = plan(model, load_gpu("b200"), Server("s", tp=tp, mem_fraction_static=0.9))
        assert result.kv_cell_bytes == (512 + 64) * 61 * 2
    fp8 = plan(model, load_gpu("b200"), Server("s", tp=8, mem_fraction_static=0.9, kv_cache_dtype="fp8_e4m3"))
    assert fp8.kv_cell_bytes == (512 + 64) * 61


def test_unknown_kv_dtype_is_rejected():
    model = resolve_model(config=str(QWEN_CONFIG), weights_gb=61.0)
    with pytest.raises(PresetError, match="kv-cache-dtype"):
        plan(model, load_gpu("h100"), Server("s", kv_cache_dtype="int3"))


def test_expected_distinct_experts_saturates():
    assert expected_distinct_experts(256, 8, 1) == pytest.approx(8)
    assert expected_distinct_experts(256, 8, 16) < 16 * 8
    assert expected_distinct_experts(256, 8, 4096) == pytest.approx(256, rel=1e-3)
    assert expected_distinct_experts(0, 8, 16) == 0


def test_moe_roofline_bytes_grow_with_batch_then_throughput_rises():
    result = plan_server(
        flash(), Server("s", tp=4, mem_fraction_static=0.85), RTX, concurrency=[1, 16, 64, 256]
    )
    points = result.roofline
    assert [p.concurrency for p in points] == [1, 16, 64, 256]
    assert all(a.bytes_per_step_gb < b.bytes_per_step_gb for a, b in itertools.pairwise(points))
    assert all(a.decode_tok_s < b.decode_tok_s for a, b in itertools.pairwise(points))
    assert all(a.per_request_tok_s > b.per_request_tok_s for a, b in itertools.pairwise(points))
    # One request reads the dense part plus top-k experts per layer: far less than all weights.
    assert points[0].bytes_per_step_gb < result.weights_per_gpu_gb / 4


def test_roofline_scales_with_bandwidth():
    llama = resolve_model(preset="llama-3.1-70b-instruct")
    slow = plan_server(llama, Server("s", tp=8), "h100")
    fast = plan_server(llama, Server("s", tp=8), {"preset": "h100", "bandwidth_tbs": 6.7})
    assert fast.roofline[0].per_request_tok_s > slow.roofline[0].per_request_tok_s


def test_roofline_is_capped_by_the_kv_pool():
    llama = resolve_model(preset="llama-3.1-70b-instruct")
    result = plan_server(llama, Server("s", tp=2, mem_fraction_static=0.85), RTX, concurrency=[4096])
    point = result.roofline[0]
    assert point.limited_by_kv_cache
    assert point.batch_per_replica == result.kv_tokens // result.roofline_context_tokens


def test_dp_multiplies_concurrent_requests():
    llama = resolve_model(preset="llama-3.1-70b-instruct")
    one = plan_server(llama, Server("s", tp=4, context_length=8192), RTX)
    two = plan_server(llama, Server("s", tp=4, dp=2, context_length=8192), RTX)
    assert two.max_concurrent_requests == 2 * one.max_concurrent_requests > 0


@pytest.mark.parametrize(
    ("server", "match"),
    [
        (Server("s", tp=2, ep=4), "ep"),
        (Server("s", tp=2, mem_fraction_static=1.2), "mem_fraction_static"),
        (Server("s", tp=0), "tp"),
    ],
)
def test_bad_server_input_is_rejected(server, match):
    with pytest.raises(PresetError, match=match):
        plan_server(resolve_model(preset="llama-3.1-70b-instruct"), server, "h100")


# --- Inputs ------------------------------------------------------------------------------------
def test_checkpoint_index_total_size_gives_weights():
    assert weights_gb_from_checkpoint(QWEN_CHECKPOINT) == pytest.approx(65524246528 / 2**30)
    model = resolve_model(config=str(QWEN_CONFIG), checkpoint=str(QWEN_CHECKPOINT))
    assert model.weights_gb == pytest.approx(61.02, abs=0.01)


def test_checkpoint_without_total_size_is_a_clear_error():
    with pytest.raises(PresetError, match="total_size"):
        weights_gb_from_checkpoint(FIXTURES / "no-total-size.index.json")


def test_config_json_fields_are_read():
    model = resolve_model(config=str(DSV3_CONFIG), weights_gb=642.0)
    assert (model.num_hidden_layers, model.n_routed_experts, model.num_experts_per_tok) == (61, 256, 8)
    assert model.expert_bits == 8.0
    assert model.first_k_dense_replace == 3


def test_config_without_weights_is_rejected():
    with pytest.raises(PresetError, match="weights"):
        plan_server(resolve_model(config=str(QWEN_CONFIG)), Server("s"), "h100")


def test_unknown_presets_name_the_known_ones():
    with pytest.raises(PresetError, match="rtx-pro-6000-blackwell"):
        load_gpu("no-such-gpu")
    with pytest.raises(PresetError, match="deepseek-v4-flash-fp4"):
        load_model_preset("no-such-model")


def test_a_misspelled_preset_key_is_refused(tmp_path, monkeypatch):

    (tmp_path / "bad.yaml").write_text("name: bad\nhf_config: llama-3.1-70b-instruct\nweights_gbb: 3\n")
    monkeypatch.setattr(presets, "MODELS_DIR", tmp_path)
    with pytest.raises(PresetError, match="weights_gbb"):
        presets.load_model_preset("bad")


@pytest.mark.parametrize("name", list_presets(HARDWARE_DIR))
def test_every_gpu_preset_is_complete(name):
    gpu = load_gpu(name)
    assert gpu.memory_mib > 10 * 1024 and gpu.bandwidth_tbs > 0.5 and gpu.source.startswith("https://")


@pytest.mark.parametrize("name", list_presets(MODELS_DIR))
def test_every_model_preset_plans_on_eight_gpus(name):
    model = load_model_preset(name)
    assert model.source.startswith("https://") and model.hf_config
    assert model.weights_gb > 0 and model.num_hidden_layers > 0
    result = plan_server(model, Server("s", tp=8), "b200")
    assert result.kv_cell_bytes > 0 or result.failure_phase == PHASE_WEIGHTS
    assert expert_bytes_total(model) <= model.weights_gb * BYTES_PER_GB


# --- JSON interface and CLI --------------------------------------------------------------------
def test_json_has_the_interface_keys():
    data = plan_server(flash(), Server("s", tp=4, mem_fraction_static=0.85), RTX).to_json()
    assert set(data) >= INTERFACE_KEYS
    assert data["roofline"] and all(set(p) >= ROOFLINE_KEYS for p in data["roofline"])
    assert isinstance(data["kv_tokens"], int) and isinstance(data["fits"], bool)
    assert data["sglang_defaults"]["sglang_version"] == PINS.sglang
    json.dumps(data)


def test_cli_json_exit_code_says_does_not_fit(capsys):
    argv = [
        "plan",
        "--model",
        "deepseek-v4-pro-fp8",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--mem-fraction-static",
        "0.88",
    ]
    code = main([*argv, "--json"])
    data = json.loads(capsys.readouterr().out)
    assert code == 1
    assert data["failure_phase"] == "kv_cache"
    assert data["weights_per_gpu_gb"] == pytest.approx(125.65, abs=0.01)


def test_cli_without_a_fraction_reports_sglangs_default(capsys):
    assert main(["plan", "--model", "deepseek-v4-flash-fp4", "--tp", "4"]) == 0
    out = capsys.readouterr().out
    assert f"mem fraction      0.854 (sglang default; SGLang {PINS.sglang} default 0.854" in out
    assert "FITS" in out


def test_cli_097_is_refused_with_exit_1(capsys):
    assert (
        main(["plan", "--model", "deepseek-v4-flash-fp4", "--tp", "4", "--mem-fraction-static", "0.97"]) == 1
    )
    assert "DOES NOT FIT (cuda_graph)" in capsys.readouterr().out


def test_cli_text_with_config_checkpoint_and_custom_gpu(capsys):
    argv = ["plan", "--config", str(QWEN_CONFIG), "--checkpoint", str(QWEN_CHECKPOINT), "--gpu-mem-gb", "80"]
    code = main([*argv, "--gpu-bw-tbs", "3.0", "--tp", "2", "--concurrency", "1,8"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "FITS" in out and "decode roofline" in out
    assert "30.51 GB per GPU" in out


def test_cli_bad_input_exits_with_the_usage_code(capsys):
    assert main(["plan", "--config", str(QWEN_CONFIG), "--tp", "1"]) == EXIT_USAGE
    assert "weights" in capsys.readouterr().err
    with pytest.raises(SystemExit) as excinfo:
        main(["plan", "--model", "x", "--concurrency", "0"])
    assert excinfo.value.code == EXIT_USAGE
