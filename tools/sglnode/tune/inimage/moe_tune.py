"""Tune SGLang's fused-MoE Triton kernel for missing shapes on this GPU; write SGLang-format configs.

Runs inside the SGLang image on a GPU (python3 moe_tune.py --cases cases.json --cache-root DIR). The
cases are `sglnode tune moe-coverage --json`'s `tune_cases` (E, N, hidden, top-k, dtype, block shape,
the file name SGLang looks up). For each batch size M it times SGLang's own `fused_experts` (the
Triton runner's kernels) under `override_config` for every config of the search space, and writes the
fastest per M as SGLang's JSON ({"M": {"BLOCK_SIZE_M": ..., "num_stages": ...}}) to
<cache-root>/configs/triton_<this Triton>/<file name>.

The cache root is what SGLANG_MOE_CONFIG_DIR points at. SGLang replaces its whole config root with it,
so the root is first seeded with a copy of the wheel's shipped configs (every Triton version's), and the
tuned files are added beside them. A file already present for this Triton version is a cache hit and is
not tuned again; the root's directory name carries the GPU, Triton and SGLang versions (chosen by
tools/gpu/tune-node.sh), the file names carry E, N, dtype and block shape. manifest.json records what
was tuned, when, over which search space and with which timings.

--dry-run seeds the root and prints the plan (search space size, files, batch sizes) without a GPU:
CI runs it in the image to check the cache layout and SGLang's file naming.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import shutil
import sys
import time
from datetime import UTC, datetime
from typing import Any

import torch
import triton
from triton.runtime.errors import OutOfResources

# Batch sizes SGLang's own tuning script covers at the low end, to 4096 tokens (decode and chunked
# prefill of this node's serving range).
BATCH_SIZES = [1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 256, 512, 1024, 1536, 2048, 3072, 4096]
QUICK_BATCH_SIZES = [1, 4, 16, 64, 256, 1024, 4096]
SEARCH = {
    # SGLang's benchmark/kernels/fused_moe_triton search space (get_configs_compute_bound), trimmed.
    "full": {
        "BLOCK_SIZE_M": [16, 32, 64, 128, 256],
        "BLOCK_SIZE_N": [32, 64, 128, 256],
        "BLOCK_SIZE_K": [64, 128, 256],
        "GROUP_SIZE_M": [1, 16, 32, 64],
        "num_warps": [4, 8],
        "num_stages": [2, 3, 4, 5],
    },
    # 48 configs (fewer under block quantization): a few minutes per file on one GPU.
    "quick": {
        "BLOCK_SIZE_M": [16, 32, 64],
        "BLOCK_SIZE_N": [64, 128],
        "BLOCK_SIZE_K": [64, 128],
        "GROUP_SIZE_M": [1],
        "num_warps": [4, 8],
        "num_stages": [3, 4],
    },
}
WARMUP_ITERS = 3
TIMED_ITERS = 10
FP8_MAX = 448.0  # float8_e4m3fn


def search_space(name: str, block_shape: list[int] | None) -> list[dict[str, int]]:
    space = SEARCH[name]
    keys = list(space)
    configs = [dict(zip(keys, values, strict=True)) for values in itertools.product(*space.values())]
    if block_shape:
        # Block-quantized FP8: a kernel tile must not straddle a quantization block.
        block_n, block_k = block_shape
        configs = [
            c for c in configs if block_n % c["BLOCK_SIZE_N"] == 0 and block_k % c["BLOCK_SIZE_K"] == 0
        ]
    return configs


def seed_root(root: str, wheel_root: str) -> bool:
    """Copy the wheel's shipped configs into an empty root; False when it was seeded already."""
    target = os.path.join(root, "configs")
    if os.path.isdir(target):
        return False
    shutil.copytree(os.path.join(wheel_root, "configs"), target)
    return True


def _inputs(case: dict[str, Any], m: int) -> dict[str, Any]:
    device = torch.device("cuda")
    e, n, k, topk = case["E"], case["N"], case["hidden"], case["topk"]
    hidden = torch.randn(m, k, dtype=torch.bfloat16, device=device) / 10
    fp8 = case.get("dtype") == "fp8_w8a8"
    w1 = torch.randn(e, 2 * n, k, dtype=torch.bfloat16, device=device) / 10
    w2 = torch.randn(e, k, n, dtype=torch.bfloat16, device=device) / 10
    extra: dict[str, Any] = {}
    if fp8:
        w1 = w1.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        w2 = w2.clamp(-FP8_MAX, FP8_MAX).to(torch.float8_e4m3fn)
        block = case.get("block_shape")
        if block:
            bn, bk = block
            extra["w1_scale"] = torch.rand(e, -(-2 * n // bn), -(-k // bk), device=device)
            extra["w2_scale"] = torch.rand(e, -(-k // bn), -(-n // bk), device=device)
            extra["block_shape"] = block
        else:
            extra["w1_scale"] = torch.rand(e, device=device)
            extra["w2_scale"] = torch.rand(e, device=device)
        extra["use_fp8_w8a8"] = True
    logits = torch.randn(m, e, device=device)
    weights, ids = torch.topk(torch.softmax(logits, dim=-1), topk, dim=-1)
    return {
        "hidden": hidden,
        "w1": w1,
        "w2": w2,
        "weights": weights,
        "ids": ids.int(),
        "logits": logits,
        **extra,
    }


def time_config(case: dict[str, Any], m: int, config: dict[str, int], inputs: dict[str, Any]) -> float | None:
    """Microseconds per fused_experts call with this config, or None when it does not compile/fit."""
    from sglang.srt.layers.moe.moe_runner.base import MoeRunnerConfig  # noqa: PLC0415 - in the image
    from sglang.srt.layers.moe.moe_runner.triton_utils import (  # noqa: PLC0415
        fused_experts,
        override_config,
    )
    from sglang.srt.layers.moe.topk import StandardTopKOutput  # noqa: PLC0415

    runner = MoeRunnerConfig(
        num_experts=case["E"],
        num_local_experts=case["E"],
        hidden_size=case["hidden"],
        intermediate_size_per_partition=case["N"],
        top_k=case["topk"],
        params_dtype=torch.bfloat16,
        inplace=False,
    )
    topk = StandardTopKOutput(inputs["weights"], inputs["ids"], inputs["logits"])
    kwargs = {
        key: inputs[key] for key in ("w1_scale", "w2_scale", "block_shape", "use_fp8_w8a8") if key in inputs
    }

    def call() -> None:
        fused_experts(inputs["hidden"], inputs["w1"], inputs["w2"], topk, runner, **kwargs)

    try:
        with override_config(dict(config)):
            for _ in range(WARMUP_ITERS):
                call()
            torch.cuda.synchronize()
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(TIMED_ITERS):
                call()
            end.record()
            torch.cuda.synchronize()
    except (RuntimeError, ValueError, AssertionError, OutOfResources):
        return None
    return start.elapsed_time(end) * 1000.0 / TIMED_ITERS


def tune_case(case: dict[str, Any], configs: list[dict[str, int]], batch_sizes: list[int]) -> dict[str, Any]:
    best: dict[str, dict[str, int]] = {}
    timings: dict[str, float] = {}
    for m in batch_sizes:
        inputs = _inputs(case, m)
        scored = [(us, cfg) for cfg in configs if (us := time_config(case, m, cfg, inputs)) is not None]
        if not scored:
            raise RuntimeError(f"{case['file_name']}: no config of the search space ran at M={m}")
        us, cfg = min(scored, key=lambda pair: pair[0])
        best[str(m)] = cfg
        timings[str(m)] = round(us, 2)
        print(f"moe_tune: {case['file_name']} M={m}: {us:.1f} us {cfg}", file=sys.stderr, flush=True)
    return {"configs": best, "best_us": timings}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", required=True, help="JSON list (moe-coverage --json tune_cases)")
    parser.add_argument("--cache-root", required=True, help="the SGLANG_MOE_CONFIG_DIR root to fill")
    parser.add_argument("--search", choices=sorted(SEARCH), default="quick")
    parser.add_argument("--batch-sizes", default=None, help="comma list (default: quick or full set)")
    parser.add_argument("--dry-run", action="store_true", help="seed the root and print the plan; no GPU")
    args = parser.parse_args()

    import sglang  # noqa: PLC0415 - after argparse, so --help is fast
    from sglang.srt.layers.moe.moe_runner.triton_utils import (  # noqa: PLC0415
        fused_moe_triton_config as lookup,
    )

    with open(args.cases, encoding="utf-8") as handle:
        cases = json.load(handle)
    if isinstance(cases, dict):
        cases = cases.get("tune_cases", [])
    wheel_root = os.path.dirname(os.path.realpath(lookup.__file__))
    seeded = seed_root(args.cache_root, wheel_root)
    version_dir = os.path.join(args.cache_root, "configs", f"triton_{triton.__version__.replace('.', '_')}")
    os.makedirs(version_dir, exist_ok=True)
    manifest_path = os.path.join(args.cache_root, "manifest.json")
    manifest: dict[str, Any] = {}
    if os.path.exists(manifest_path):
        with open(manifest_path, encoding="utf-8") as handle:
            manifest = json.load(handle)
    manifest.update(
        sglang=sglang.__version__,
        triton=triton.__version__,
        torch=torch.__version__,
        seeded_from=wheel_root,
    )
    manifest.setdefault("tuned", {})
    default_sizes = QUICK_BATCH_SIZES if args.search == "quick" else BATCH_SIZES
    batch_sizes = [int(v) for v in args.batch_sizes.split(",")] if args.batch_sizes else default_sizes
    plan = []
    for case in cases:
        path = os.path.join(version_dir, case["file_name"])
        configs = search_space(args.search, case.get("block_shape"))
        plan.append({"file_name": case["file_name"], "cached": os.path.exists(path), "configs": len(configs)})
    print(
        json.dumps({"seeded": seeded, "version_dir": version_dir, "batch_sizes": batch_sizes, "plan": plan})
    )
    if args.dry_run:
        return 0
    if not torch.cuda.is_available():
        print("moe_tune: needs a GPU (use --dry-run to check the plan)", file=sys.stderr)
        return 2
    manifest["device_name"] = torch.cuda.get_device_name(0)
    for case, step in zip(cases, plan, strict=True):
        if step["cached"]:
            print(f"moe_tune: {case['file_name']}: cached, not tuned again", file=sys.stderr)
            continue
        started = time.monotonic()
        tuned = tune_case(case, search_space(args.search, case.get("block_shape")), batch_sizes)
        target = os.path.join(version_dir, case["file_name"])
        with open(target + ".tmp", "w", encoding="utf-8") as handle:
            json.dump(tuned["configs"], handle, indent=4)
        os.replace(target + ".tmp", target)
        manifest["tuned"][case["file_name"]] = {
            "tuned_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "seconds": round(time.monotonic() - started, 1),
            "search": args.search,
            "configs_tried": step["configs"],
            "batch_sizes": batch_sizes,
            "best_us": tuned["best_us"],
            "case": case,
        }
        with open(manifest_path, "w", encoding="utf-8") as handle:
            json.dump(manifest, handle, indent=1)
        print(f"moe_tune: wrote {target}", file=sys.stderr)
    with open(manifest_path, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
