"""The case matrix the planner's port of SGLang's memory arithmetic is checked over.

GPU memory as nvidia-smi reports it (MiB) for 24/48/80/96/141/180 GB cards x TP 1/2/4/8 x
regular / PD prefill / PD decode x speculative decoding off/on, for one model per attention
family (models/). Pure data: imported by the tests and fed to memory_oracle.py in the image.
"""

from __future__ import annotations

from typing import Any

from sglnode.pins import PINS

# RTX 4090, RTX A6000, H100 80GB, RTX PRO 6000 Blackwell, H200, B200 (nvidia-smi memory.total)
NODE_GPU_MIB = PINS.gpu.memory_mib  # this node's GPU (its hardware preset, named by the pins)
GPU_MIB = tuple(sorted({24564, 49140, 81559, NODE_GPU_MIB, 143771, 183359}))
TP_SIZES = (1, 2, 4, 8)
MODES = (None, "prefill", "decode")
# model dir -> the speculative settings a real deployment of it uses
MODELS: dict[str, dict[str, Any]] = {
    "llama-3.1-70b-instruct": {
        "speculative_algorithm": "EAGLE3",
        "speculative_draft_model_path": "{models}/llama-3.1-70b-eagle3-draft",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    },
    "deepseek-v3": {
        "speculative_algorithm": "NEXTN",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    },
    # The pinned SGLang serves DeepSeek-V4's MTP heads as EAGLE ("Only EAGLE and DSPARK speculative
    # algorithms are supported for DeepseekV4ForCausalLM"); NEXTN is refused.
    "deepseek-v4-flash": {
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    },
}
KV_BUDGETS_GIB = (6.0, 40.0)


def case_id(model: str, gpu_mib: int, tp: int, mode: str | None, spec: bool) -> str:
    return f"{model}/{gpu_mib}MiB/tp{tp}/{mode or 'regular'}/{'spec' if spec else 'nospec'}"


def cases(models_dir: str) -> list[dict[str, Any]]:
    out = []
    for model, spec_args in MODELS.items():
        for gpu_mib in GPU_MIB:
            for tp in TP_SIZES:
                for mode in MODES:
                    for spec in (False, True):
                        server_args: dict[str, Any] = {"tp_size": tp}
                        if mode:
                            server_args["disaggregation_mode"] = mode
                            server_args["disaggregation_transfer_backend"] = "nixl"
                        if spec:
                            server_args.update(
                                {
                                    k: v.format(models=models_dir) if isinstance(v, str) else v
                                    for k, v in spec_args.items()
                                }
                            )
                        out.append(
                            {
                                "id": case_id(model, gpu_mib, tp, mode, spec),
                                "model": model,
                                "model_dir": f"{models_dir}/{model}",
                                "gpu_mib": gpu_mib,
                                "server_args": server_args,
                                # KV sizing does not depend on the card: size pools once per model.
                                "budgets_gib": list(KV_BUDGETS_GIB) if gpu_mib == NODE_GPU_MIB else [],
                            }
                        )
    return out
