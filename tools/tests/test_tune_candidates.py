"""Expanding a spec: strategies, ids, overrides, vetting by validator/kernel audit/planner, NCCL order."""

from pathlib import Path

from tune_helpers import write_spec

from sglnode.tune.campaign import plan_candidates
from sglnode.tune.candidates import apply_overrides, expand
from sglnode.tune.nccl import choose_variants, load_measurements, score_variants
from sglnode.tune.spec import load_spec

FIXTURE = Path(__file__).parent / "fixtures" / "tune" / "allreduce-nccl.json"


def test_one_at_a_time_is_the_base_then_each_axis_value_alone(tmp_path):
    candidates, _, _ = expand(load_spec(write_spec(tmp_path)))
    assert [c.label for c in candidates] == ["base", "topo=tp8", "mem=0.35", "spec=eagle-3", "attn=fa3"]
    assert len({c.id for c in candidates}) == 5
    mem = candidates[2]
    assert mem.data["servers"][0]["mem_fraction_static"] == 0.35
    assert mem.data["name"] == f"tune-demo-{mem.id[:8]}"


def test_ids_are_stable_and_change_with_what_decides_the_result(tmp_path):
    first = [c.id for c in expand(load_spec(write_spec(tmp_path)))[0]]
    assert first == [c.id for c in expand(load_spec(write_spec(tmp_path)))[0]]
    slower = [c.id for c in expand(load_spec(write_spec(tmp_path, bench={"concurrency": [1, 4]})))[0]]
    assert not set(first) & set(slower)  # other bench settings: other results
    other_slo = write_spec(tmp_path, slo={"max_itl_p99_ms": 10})
    assert first == [c.id for c in expand(load_spec(other_slo))[0]]  # an SLO only re-ranks


def test_grid_is_every_combination_and_max_candidates_truncates_with_a_note(tmp_path):
    axes = {"cuda_graph_max_bs_decode": [64, 128, 256], "chunked_prefill_size": [4096, 8192]}
    spec = write_spec(tmp_path, strategy="grid", axes=axes)
    candidates, _, notes = expand(load_spec(spec))
    assert len(candidates) == 6
    capped = write_spec(tmp_path, strategy="grid", axes=axes, max_candidates=4)
    candidates, _, notes = expand(load_spec(capped))
    assert len(candidates) == 4
    assert "2 candidate(s) beyond max_candidates" in notes[0]


def test_overrides_reach_the_targeted_servers_only():
    data = {
        "server_defaults": {"speculative": {"algorithm": "EAGLE"}},
        "servers": [{"name": "prefill0", "args": {"x": 1}}, {"name": "decode0"}],
    }
    out = apply_overrides(
        data,
        {"speculative": None, "moe_runner_backend": "triton", "cuda_graph_max_bs_decode": 64},
        {"NCCL_PROTO": "Simple"},
        ["decode0"],
    )
    prefill, decode = out["servers"]
    assert prefill == {"name": "prefill0", "args": {"x": 1}}
    assert decode["speculative"] is None  # beats server_defaults
    assert decode["args"] == {"moe_runner_backend": "triton"}
    assert decode["cuda_graph_max_bs_decode"] == 64
    assert out["nccl"] == {"NCCL_PROTO": "Simple"}
    assert "nccl" not in data  # the source mapping is untouched


def test_vetting_refuses_what_the_kernel_audit_or_the_planner_refuse(tmp_path):
    candidates, _, _ = plan_candidates(load_spec(write_spec(tmp_path)))
    by_label = {c.label: c for c in candidates}
    fa3 = by_label["attn=fa3"]
    assert fa3.verdict == "refused_kernels"
    assert "FlashAttention v3" in fa3.reasons[0] and "sm_120" in fa3.reasons[0]
    # memory_preflight: warn deploys what the planner refuses, with the prediction as a note.
    assert by_label["mem=0.35"].verdict == "deploy"
    assert "does not fit" in by_label["mem=0.35"].notes[0]
    refused, _, _ = plan_candidates(load_spec(write_spec(tmp_path, memory_preflight="refuse")))
    mem = next(c for c in refused if c.label == "mem=0.35")
    assert mem.verdict == "refused_memory"
    assert "Loaded weights leave no GPU memory for the KV cache" in mem.reasons[0]


def test_an_invalid_candidate_is_refused_by_the_topology_validator(tmp_path):
    spec = write_spec(tmp_path, axes={"attention_backend": ["no-such-backend"]})
    candidates, _, _ = plan_candidates(load_spec(spec))
    bad = candidates[-1]
    assert bad.verdict == "invalid"
    assert "attention_backend" in bad.reasons[0]


def test_nccl_variants_follow_the_measurement_and_failures_are_dropped():
    measurements = load_measurements(FIXTURE)
    scores = score_variants(measurements, 4, [4096, 1 << 20])
    assert [s.variant for s in scores] == ["proto-simple", "measured-only", "pcie-defaults", "p2p-off"]
    # Each variant keeps its worst group: pcie-defaults' GPUs 4-7 (44/64/210 us).
    assert scores[2].band_us == (44 + 64 + 210) / 3
    assert not scores[3].ok and "timed out" in scores[3].note
    declared = {"pcie-defaults": {}, "p2p-off": {"NCCL_P2P_DISABLE": "1"}, "unmeasured": {"X": "1"}}
    choice = choose_variants(declared, measurements, 4, [4096, 1 << 20], top=2)
    assert [name for name, _ in choice.variants] == ["proto-simple", "measured-only", "unmeasured"]
    assert "all-reduce failed" in choice.dropped["p2p-off"]
    assert "not among the 2 fastest" in choice.dropped["pcie-defaults"]
    # A TP size that was not measured uses the nearest group size, and says so.
    assert "measured at 4 ranks" in score_variants(measurements, 8, [4096, 1 << 20])[0].note


def test_the_sweep_runs_the_measured_best_nccl_variant_first(tmp_path):
    spec = write_spec(
        tmp_path,
        axes={"nccl": {"pcie-defaults": {}, "proto-simple": {"NCCL_PROTO": "Simple"}}},
        nccl_measurements={"file": str(FIXTURE), "top": 1},
    )
    candidates, _, notes = plan_candidates(load_spec(spec))
    assert [c.label for c in candidates] == ["nccl=proto-simple"]
    assert candidates[0].data["nccl"] == {"NCCL_PROTO": "Simple"}
    assert any("pcie-defaults dropped" in note for note in notes)
