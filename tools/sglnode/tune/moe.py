"""Which fused-MoE Triton kernel configs the pinned SGLang ships for this node's GPU, per model and TP/EP.

The shapes come from the model presets (their config.json) with SGLang's own rules:
  E = n_routed_experts / ep, plus the fused shared expert where SGLang fuses it (DeepSeek-V3/R1:
      DeepseekV3ForCausalLM, 256 routed + 1 shared, no EP on CUDA; models/deepseek_v2.py
      shared_experts_fusion_disable_reason);
  N = moe_intermediate_size / (tp / ep)  (the w2 shape's last dimension, fused_moe_triton_config.py
      try_get_optimal_moe_config: `E, _, N = w2_shape`);
  dtype = fp8_w8a8 with the checkpoint's weight_block_size for FP8 experts, None for BF16
      (get_config_dtype_str).
The MoE runner on sm_120 (srt/arg_groups/overrides.py _moe_runner_backend_quant_constraints and
layers/quantization/mxfp4.py:426-427; kernels.yaml `moe_runner_backend`): Triton for BF16/FP8 experts,
flashinfer_mxfp4 (CUTLASS sm120) for MXFP4 experts, flashinfer_cutlass for modelopt_fp4. Where the
runner is not Triton, a missing Triton config does not matter.

The lookup itself is SGLang's (inimage/moe_probe.py runs get_config_file_name/get_moe_configs in the
image with the device name set to this GPU's), so the classification is exactly what the server does:
exact (this Triton's directory), fallback (another Triton version's file, SGLang warns it may be
sub-optimal), default (no file: SGLang's heuristic config). Missing = Triton-run shapes that are not
exact; tools/gpu/tune-node.sh tunes those on the node.
"""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import asdict, dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from sglnode.pins import PINS
from sglnode.planning.presets import MODELS_DIR, PresetError, load_gpu, load_hf_config, load_model_preset
from sglnode.topology.render import DEFAULT_SGLANG_IMAGE

DEFAULT_GPU = PINS.gpu.preset


def device_name_of(gpu: str = DEFAULT_GPU) -> str:
    """torch.cuda.get_device_name() on the node (the hardware preset's device_name): the name SGLang
    puts in config file names (spaces become underscores)."""
    name = load_gpu(gpu).device_name
    if not name:
        raise PresetError(f"GPU preset {gpu} has no device_name: SGLang's MoE config files are keyed by it")
    return name


# DeepSeek-V3/R1's fusable layout (models/deepseek_v2.py:3358-3372).
FUSED_SHARED_ARCHITECTURES = {"DeepseekV3ForCausalLM": (256, 1)}
# Experts stored as MXFP4 (4 bits + one 8-bit scale per 32 values).
MXFP4_EXPERT_BITS = 4.25
NO_GPU_LIBS = "/opt/sglnode/no-gpu"
INIMAGE_MOUNT = "/sglnode-inimage"
CONFIG_MOUNT = "/opt/sglnode/moe-configs"
PROBE_TIMEOUT_S = 900
TAG_FILE = Path(".cache") / "sglang-image.tag"
RUNNER_SOURCES = {
    "triton": "srt/layers/moe/moe_runner/triton.py (auto on sm_120 for BF16/FP8 experts)",
    "flashinfer_mxfp4": "srt/layers/quantization/mxfp4.py:426-427 (MXFP4 experts: CUTLASS sm120)",
    "flashinfer_cutlass": "srt/arg_groups/overrides.py _moe_runner_backend_quant_constraints (modelopt_fp4)",
}


class ProbeError(RuntimeError):
    """The SGLang image could not run the lookup."""


__all__ = ["PresetError", "ProbeError"]


@dataclass(frozen=True)
class MoeRow:
    preset: str
    architecture: str
    tp: int
    ep: int
    E: int  # SGLang's names, as in the config file names
    N: int
    hidden: int
    topk: int
    dtype: str | None
    block_shape: list[int] | None
    runner: str
    experts: str  # the routed experts' format: bf16 | fp8 | mxfp4 | nvfp4
    fused_shared: int
    note: str

    @property
    def id(self) -> str:
        return f"{self.preset}/tp{self.tp}" + (f"-ep{self.ep}" if self.ep > 1 else "")


def moe_presets() -> list[str]:
    """Every shipped model preset with routed experts."""
    names = sorted(p.stem for p in MODELS_DIR.glob("*.yaml"))
    return [name for name in names if load_model_preset(name).is_moe]


def _expert_format(preset: Any, hf: dict[str, Any]) -> tuple[str, str, str | None, list[int] | None, str]:
    """(runner on sm_120, expert format, SGLang dtype string, block shape, note) for the routed experts."""
    if abs(preset.expert_bits - MXFP4_EXPERT_BITS) < 1e-6:
        return "flashinfer_mxfp4", "mxfp4", None, None, "MXFP4 experts (preset expert_bits 4.25)"
    if preset.quantization == "modelopt_fp4":
        return "flashinfer_cutlass", "nvfp4", None, None, "NVFP4 experts (modelopt_fp4)"
    quant = hf.get("quantization_config") or {}
    if preset.quantization == "fp8" or quant.get("quant_method") == "fp8":
        block = quant.get("weight_block_size")
        return "triton", "fp8", "fp8_w8a8", list(block) if block else None, "FP8 experts"
    return "triton", "bf16", None, None, "BF16 experts"


def expert_shape(name: str, tp: int, ep: int = 1) -> MoeRow:
    preset = load_model_preset(name)
    if not preset.is_moe:
        raise PresetError(f"{name}: a dense model (no routed experts), no fused MoE")
    if tp % ep:
        raise PresetError(f"{name}: ep {ep} does not divide tp {tp}")
    hf = load_hf_config(preset.hf_config)
    architecture = (hf.get("architectures") or [""])[0]
    runner, experts, dtype, block, note = _expert_format(preset, hf)
    fusable = FUSED_SHARED_ARCHITECTURES.get(architecture)
    fused = (
        preset.n_shared_experts
        if fusable == (preset.n_routed_experts, preset.n_shared_experts) and ep == 1
        else 0
    )
    if preset.n_routed_experts % ep:
        raise PresetError(f"{name}: {preset.n_routed_experts} experts do not split over ep {ep}")
    moe_tp = tp // ep
    if preset.moe_intermediate_size % moe_tp:
        raise PresetError(f"{name}: moe_intermediate_size {preset.moe_intermediate_size} over tp {moe_tp}")
    return MoeRow(
        preset=name,
        architecture=architecture,
        tp=tp,
        ep=ep,
        E=preset.n_routed_experts // ep + fused,
        N=preset.moe_intermediate_size // moe_tp,
        hidden=preset.hidden_size,
        topk=preset.num_experts_per_tok,
        dtype=dtype,
        block_shape=block,
        runner=runner,
        experts=experts,
        fused_shared=fused,
        note=note + (f"; {fused} shared expert fused into E" if fused else ""),
    )


def plan_rows(presets: list[str], tps: list[int], eps: list[int]) -> list[MoeRow]:
    rows = []
    for name in presets:
        for tp in tps:
            for ep in eps:
                if tp % ep == 0:
                    rows.append(expert_shape(name, tp, ep))
    return rows


def default_image() -> str:
    """SGLNODE_SGLANG_IMAGE, else the last `make image` tag (.cache/sglang-image.tag), else the role's."""
    if os.environ.get("SGLNODE_SGLANG_IMAGE"):
        return os.environ["SGLNODE_SGLANG_IMAGE"]
    if TAG_FILE.is_file():
        return TAG_FILE.read_text(encoding="utf-8").strip()
    return DEFAULT_SGLANG_IMAGE


def inimage_dir() -> Path:
    return Path(str(resources.files("sglnode.tune") / "inimage"))


def run_probe(
    image: str, cases: list[dict[str, Any]], device_name: str | None, config_dir: Path | None = None
) -> dict[str, Any]:
    """Run SGLang's lookup in the image (no GPU, no network); its JSON answer."""
    argv = ["docker", "run", "--rm", "-i", "--network", "none", "-e", f"LD_LIBRARY_PATH={NO_GPU_LIBS}"]
    argv += ["-v", f"{inimage_dir()}:{INIMAGE_MOUNT}:ro"]
    if config_dir is not None:
        argv += [
            "-v",
            f"{config_dir.resolve()}:{CONFIG_MOUNT}:ro",
            "-e",
            f"SGLANG_MOE_CONFIG_DIR={CONFIG_MOUNT}",
        ]
    argv += [image, "python3", f"{INIMAGE_MOUNT}/moe_probe.py"]
    gpu = PINS.gpu  # the node's GPU, as the probe's stand-in device when the machine has none
    request = json.dumps(
        {
            "device_name": device_name,
            "capability": gpu.compute_capability,
            "memory_mib": gpu.memory_mib,
            "cases": cases,
        }
    )
    try:
        result = subprocess.run(
            argv, input=request, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ProbeError(f"cannot run {image}: {exc}") from exc
    if result.returncode != 0:
        raise ProbeError(
            f"the MoE probe failed in {image} (exit {result.returncode}): {result.stderr[-2000:]}"
        )
    try:
        return json.loads(result.stdout)
    except ValueError as exc:
        raise ProbeError(f"the MoE probe printed no JSON: {result.stdout[-500:]}") from exc


def classify_row(row: MoeRow, lookup: dict[str, Any]) -> dict[str, Any]:
    """The row's verdict: not_triton | exact | fallback | default, and whether it is missing."""
    up = lookup["up"]
    verdict = "not_triton" if row.runner != "triton" else up["class"]
    missing = verdict in ("fallback", "default", "unknown")
    return {
        **asdict(row),
        "id": row.id,
        "file_name": lookup["file_name"],
        "lookup": up["class"],
        "lookup_path": up.get("path"),
        "lookup_triton": up.get("triton"),
        "batch_sizes": up.get("batch_sizes"),
        "down": lookup["down"]["class"],
        "verdict": verdict,
        "missing": missing,
    }


def coverage(
    rows: list[MoeRow],
    image: str,
    device_name: str | None = None,
    config_dir: Path | None = None,
    probe: Any = run_probe,
) -> dict[str, Any]:
    """The coverage report: every row classified, the missing ones listed, what ships for the GPU."""
    name = device_name or device_name_of()
    cases = [
        {"id": row.id, "E": row.E, "N": row.N, "dtype": row.dtype, "block_shape": row.block_shape}
        for row in rows
    ]
    answer = probe(image, cases, name, config_dir)
    by_id = {case["id"]: case for case in answer["cases"]}
    classified = [classify_row(row, by_id[row.id]) for row in rows]
    missing = sorted({r["file_name"] for r in classified if r["missing"]})
    return {
        "image": image,
        "sglang": answer["sglang"],
        "triton": answer["triton"],
        "device_name": answer["device_name"],
        "config_root": answer["config_root"],
        "config_dir_env": answer.get("config_dir_env"),
        "shipped_for_device": answer["shipped_for_device"],
        "rows": classified,
        "missing": missing,
        "tune_cases": _tune_cases(classified),
    }


def _tune_cases(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One tuning job per missing file (inimage/moe_tune.py's input), deduplicated."""
    jobs: dict[str, dict[str, Any]] = {}
    for row in rows:
        if row["missing"] and row["file_name"] not in jobs:
            jobs[row["file_name"]] = {
                "file_name": row["file_name"],
                "E": row["E"],
                "N": row["N"],
                "hidden": row["hidden"],
                "topk": row["topk"],
                "dtype": row["dtype"],
                "block_shape": row["block_shape"],
                "for": [],
            }
        if row["missing"]:
            jobs[row["file_name"]]["for"].append(row["id"])
    return list(jobs.values())


def render_coverage(report: dict[str, Any]) -> str:
    lines = [
        f"Fused-MoE Triton configs for {report['device_name']} in {report['image']}",
        f"SGLang {report['sglang']}, Triton {report['triton']}; config root {report['config_root']}"
        + (" (SGLANG_MOE_CONFIG_DIR)" if report.get("config_dir_env") else " (the wheel's)"),
        f"Shipped for this GPU name: {', '.join(report['shipped_for_device']) or 'none'}",
        "",
        f"{'preset':<24} {'tp':>2} {'ep':>2} {'E':>4} {'N':>5} {'experts':<18} {'runner':<17} "
        f"{'lookup':<16} verdict",
    ]
    lines.append("-" * len(lines[-1]))
    for row in report["rows"]:
        dtype = (row["dtype"] or row["experts"]) + (f" {row['block_shape']}" if row["block_shape"] else "")
        lookup = row["lookup"] + (f" ({row['lookup_triton']})" if row["lookup"] == "fallback" else "")
        if row["verdict"] == "not_triton":
            lookup = "-"
            verdict = "n/a: not Triton on sm_120, a Triton config does not matter"
        elif row["missing"]:
            verdict = "MISSING"
        else:
            verdict = "ok"
        lines.append(
            f"{row['preset']:<24} {row['tp']:>2} {row['ep']:>2} {row['E']:>4} {row['N']:>5} {dtype:<18} "
            f"{row['runner']:<17} {lookup:<16} {verdict}"
        )
    lines.append("")
    if report["missing"]:
        count = len(report["missing"])
        lines.append(f"Missing for Triton {report['triton']} ({count}): tune with tools/gpu/tune-node.sh")
        lines += [f"  {name}" for name in report["missing"]]
    else:
        lines.append("Missing: none (every Triton-run shape has a config for this Triton version)")
    return "\n".join(lines) + "\n"
