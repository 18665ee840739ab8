"""SGLang's startup sequence, replayed from the planner's memory model, and SGLang's ways of dying.

Every line and every fatal message here is rendered from the upstream catalogue: the format
strings and error messages of the pinned SGLang, extracted from its wheel with their file,
line and function (sglnode/upstream/sglang-strings.yaml). Traceback frames name those same files
and functions. So `sglnode wait` / `sglnode diagnose` read the simulator exactly as they would read
the pinned SGLang, and a test against the simulator means something. The numbers are the planner's
(simulated), never measurements.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from sglnode.planning.planner import (
    PHASE_CUDA_GRAPH,
    PHASE_KV_CACHE,
    PHASE_WEIGHTS,
    PlanResult,
    plan,
    resolve_model,
    speculative_algorithm,
)
from sglnode.planning.presets import BYTES_PER_GB, load_gpu
from sglnode.planning.sglang_memory import KVBudget
from sglnode.readiness import loglines
from sglnode.sim.config import SGLANG_VERSION, SimConfig
from sglnode.sim.log import SimLog
from sglnode.upstream import catalog

# Share of SGLNODE_SIM_STARTUP_S each phase takes (weight loading dominates on a real node);
# the rest goes to the HTTP server and its warmup request.
PHASE_SHARE = {"init": 0.1, "weights": 0.5, "kv": 0.05, "graphs": 0.25}
DEFAULT_MAX_PREFILL_TOKENS = 16384  # --max-prefill-tokens default (srt/arg_groups/fields)
# Where the image installs SGLang (images/sglang: a venv at /opt/sglang); frames name files there.
SITE_PACKAGES = "/opt/sglang/lib/python3.12/site-packages"
# What a failed allocation typically reports: one weight shard in flight, a few MiB left free.
WEIGHT_SHARD_ALLOC_GIB = 3.5
OOM_FREE_MIB = 18.56
EXIT_SIGKILLED = 128 + signal.SIGKILL
SIGKILL_GRACE_S = 0.1
GRAPH_BACKEND = "CUDA graph"  # cuda_graph_setup.py graph_backend["cuda"]
DECODE_GRAPH_BACKEND = "full"
PREFILL_GRAPH_BACKEND = "breakable"
KV_DTYPE_NAMES = {
    "bfloat16": "torch.bfloat16",
    "fp8_e4m3": "torch.float8_e4m3fn",
    "fp8_e5m2": "torch.float8_e5m2",
}
# torch.distributed's wrapping of an NCCL failure, as printed under SGLang's pynccl error.
NCCL_ERROR_STR = "unhandled system error (run with NCCL_DEBUG=INFO for details)"


class StartupFailed(Exception):
    """The simulated server died during init (the log already says why)."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase


def plan_for(config: SimConfig) -> PlanResult:
    model = resolve_model(preset=config.model_preset, weights_gb=config.weights_gb)
    return plan(model, load_gpu(config.gpu), config.server())


def kill_self() -> None:
    """How SGLang's launcher ends: kill_process_tree(include_parent=True) SIGKILLs itself."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    # Still here: we are PID 1 in a container, which ignores its own SIGKILL. Exit as a shell
    # reports a SIGKILLed process (128 + 9), which is what `docker` shows for SGLang too.
    time.sleep(SIGKILL_GRACE_S)
    os._exit(EXIT_SIGKILLED)


def frame(entry_id: str, code: str) -> tuple[str, int, str, str]:
    """A traceback frame at the upstream string's own file, line and function."""
    entry = catalog.get(entry_id)
    function = entry.template.function.rsplit(".", 1)[-1] or "<module>"
    return (f"{SITE_PACKAGES}/{entry.file}", entry.template.line, function, code)


def traceback_text(frames: list[tuple[str, int, str, str]], error: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(error)
    return "\n".join(lines)


def scheduler_frame() -> tuple[str, int, str, str]:
    return frame("scheduler_exception", "scheduler = Scheduler(")


def capture_batch_sizes(result: PlanResult) -> list[int]:
    return list(result.sglang.decode_bs)


@dataclass
class Startup:
    config: SimConfig
    log: SimLog
    sleep: Callable[[float], None] = time.sleep
    die: Callable[[], None] = kill_self

    def _pause(self, phase: str) -> None:
        self.sleep(self.config.startup_s * PHASE_SHARE[phase])

    def _fail(self, text: str, phase: str) -> None:
        self.log.info(loglines.SCHEDULER_EXCEPTION.render(traceback=text))
        self.log.info(loglines.SIGQUIT.text, rank_tag="")
        pid = os.getpid()
        self.log.info(
            loglines.KILL_PROCESS_TREE.render(parent_pid=pid, include_parent=True, getpid=pid), rank_tag=""
        )
        self.die()
        raise StartupFailed(phase)

    def run(self) -> PlanResult:
        """Print the startup lines; returns the plan, or dies the way SGLang does."""
        result = plan_for(self.config)
        self._init(result)
        self._load_weights(result)
        avail_gb = self._allocate_kv_cache(result)
        if result.sglang.decode_graph and not self.config.decode_graph_disabled:
            avail_gb = self._capture_decode_graphs(result, avail_gb)
        if result.sglang.prefill_graph:
            avail_gb = self._capture_prefill_graphs(result, avail_gb)
        self.log.info(
            loglines.MAX_TOTAL_NUM_TOKENS.render(
                max_total_num_tokens=result.kv_tokens,
                chunked_prefill_size=result.sglang.chunked_prefill_size,
                max_prefill_tokens=DEFAULT_MAX_PREFILL_TOKENS,
                max_running_requests=self.max_running_requests(result),
                context_len=result.context_length,
                device="available_gpu_mem",
                startup_available_gpu_memory_gb=avail_gb,
            )
        )
        return result

    def _init(self, result: PlanResult) -> None:
        self._pause("init")
        if self.config.faults.nccl_init:
            error = "RuntimeError: " + catalog.get("pynccl_error").render(error_str=NCCL_ERROR_STR)
            nccl = frame("pynccl_error", 'raise RuntimeError(f"NCCL error: {error_str}")')
            self._fail(traceback_text([scheduler_frame(), nccl], error), "nccl")

    def _load_weights(self, result: PlanResult) -> None:
        self.log.info(loglines.LOAD_WEIGHT_BEGIN.render(get_available_gpu_memory=result.pre_load_free_gb))
        if self.config.faults.hang:
            self._hang()
        self._pause("weights")
        if PHASE_WEIGHTS in {result.failure_phase, self.config.faults.oom_phase}:
            self._oom_in_weights(result)
        self.log.info(
            loglines.LOAD_WEIGHT_END.render(
                weight_load_time=self.config.startup_s * PHASE_SHARE["weights"],
                type=result.model.architecture or "Model",
                quant_str="",
                after_avail_memory=result.avail_after_weights_gb,
                weight_load_mem_usage=result.weights_per_gpu_gb,
            )
        )

    def _allocate_kv_cache(self, result: PlanResult) -> float:
        """Returns the free memory left after the KV pool."""
        self._pause("kv")
        if PHASE_KV_CACHE in {result.failure_phase, self.config.faults.oom_phase}:
            self._kv_budget_error(result)
        if result.model.attention == "dsv4":
            self._log_dsv4_pools(result)
        else:
            half_gb = result.kv_pool_gb / 2
            self.log.info(
                loglines.KV_CACHE_ALLOCATED.render(
                    cache_name="KV Cache",
                    post_capture_active="is allocated",
                    dtype=KV_DTYPE_NAMES.get(result.kv_cache_dtype, result.kv_cache_dtype),
                    num_tokens=result.kv_tokens,
                    k_size_GB=half_gb,
                    v_size_GB=half_gb,
                )
            )
        avail_gb = result.avail_after_weights_gb - result.kv_pool_gb
        self.log.info(loglines.MEMORY_POOL_END.render(get_available_gpu_memory=avail_gb))
        return avail_gb

    def _log_dsv4_pools(self, result: PlanResult) -> None:
        pool = result.model.dsv4_pool()
        speculative = speculative_algorithm(result.server) is not None
        sizes = pool.pool_tokens(
            int(result.kv_budget_gb * BYTES_PER_GB), result.max_running_requests or 1, speculative
        )
        gb = float(BYTES_PER_GB)
        self.log.info(
            catalog.get("dsv4_memory_calculation").render(
                _unified=False,
                _unified_fp8=False,
                _dspark_draft_on_bf16=False,
                bytes_per_full_token=sizes.bytes_per_full_token,
                available_bytes=result.kv_budget_gb,
                c128_state_fixed_bytes=sizes.fixed_bytes / gb,
                c2_state_fixed_bytes=0.0,
                swa_fixed_bytes=0.0,
                swa_ring_fixed_bytes=0.0,
                c4_state_fixed_bytes=0.0,
                full_max_total_num_tokens=sizes.full,
            )
        )
        self.log.info(
            loglines.DSV4_POOL_SIZES.render(
                full=sizes.full,
                swa=sizes.swa,
                c4_max_total_num_tokens=sizes.c4,
                c128_max_total_num_tokens=sizes.c128,
                c4_state_pool_size=sizes.swa // pool.page_size * pool.rings(speculative).get(4, 0),
                c128_state_pool_size=0,
            )
        )

    def _capture_decode_graphs(self, result: PlanResult, avail_gb: float) -> float:
        """Returns the free memory left after capture."""
        speculative = speculative_algorithm(result.server) is not None
        spec = result.server.speculative
        name = "target verify" if speculative else "target decode"
        self.log.info(
            loglines.CUDA_GRAPH_BEGIN.render(
                capture_name=name,
                graph_backend=GRAPH_BACKEND,
                decode_backend=DECODE_GRAPH_BACKEND,
                num_tokens_per_req=(spec.num_draft_tokens or 1) if spec else 1,
                before_mem=avail_gb,
            )
        )
        self._pause("graphs")
        if PHASE_CUDA_GRAPH in {result.failure_phase, self.config.faults.oom_phase}:
            self._cuda_graph_oom(result, avail_gb)
        # memory_hook.py reserves 2 MiB per decode batch size up to max bs for the graphs.
        graph_gb = min(result.sglang.decode_max_bs * 2 / 1024, max(avail_gb, 0.0) / 2)
        self.log.info(
            loglines.CUDA_GRAPH_END.render(
                capture_name=name,
                graph_backend=GRAPH_BACKEND,
                capture_bs=capture_batch_sizes(result),
                capture_time=self.config.startup_s * PHASE_SHARE["graphs"],
                memory_usage_gb=graph_gb,
                after_mem=avail_gb - graph_gb,
            )
        )
        return avail_gb - graph_gb

    def _capture_prefill_graphs(self, result: PlanResult, avail_gb: float) -> float:
        begin, end = catalog.get("capture_prefill_begin"), catalog.get("capture_prefill_end")
        self.log.info(
            begin.render(
                capture_name="target prefill",
                prefill_backend=PREFILL_GRAPH_BACKEND,
                capture_num_tokens=result.sglang.prefill_max_bs,
                before_mem=avail_gb,
            )
        )
        graph_gb = min(len(result.sglang.prefill_bs) * 8 / 1024, max(avail_gb, 0.0) / 2)
        self.log.info(
            end.render(
                capture_name="target prefill",
                capture_time=0.0,
                mem_usage=graph_gb,
                after_mem=avail_gb - graph_gb,
            )
        )
        return avail_gb - graph_gb

    def max_running_requests(self, result: PlanResult) -> int:
        """The flag when given, else what the planner resolved as SGLang would."""
        return self.config.max_running_requests or result.max_running_requests or 1

    def _hang(self) -> None:
        # A hung init (e.g. a stuck collective): nothing more is printed and nothing listens.
        while True:
            self.sleep(3600)

    def _oom_in_weights(self, result: PlanResult) -> None:
        error = loglines.CUDA_OOM.format(
            alloc_gib=WEIGHT_SHARD_ALLOC_GIB,
            gpu=0,
            total_gib=result.gpu.memory_gb,
            free_mib=OOM_FREE_MIB,
        )
        load = frame("load_weight_end", "self.model = get_model(")
        self._fail(traceback_text([scheduler_frame(), load], error), PHASE_WEIGHTS)

    def _kv_budget_error(self, result: PlanResult) -> None:
        # The budget as the planner computes it (SGLang's formula, planner estimates for its inputs);
        # an injected fault with a budget that fits forces the error by what the weights leave.
        budget = KVBudget(
            available_gb=result.avail_after_weights_gb,
            pre_model_load_gb=result.pre_load_free_gb,
            mem_fraction_static=result.mem_fraction_static,
        )
        error = "ValueError: " + catalog.get("kv_budget_no_memory").render(
            mem_fraction_static=result.mem_fraction_static,
            suggested_mem_fraction_static=budget.suggested_mem_fraction_static,
            minimum_mem_fraction_static=budget.minimum_mem_fraction_static,
        )
        frames = [scheduler_frame(), frame("kv_budget_no_memory", "raise ValueError(")]
        self._fail(traceback_text(frames, error), PHASE_KV_CACHE)

    def _cuda_graph_oom(self, result: PlanResult, avail_gb: float) -> None:
        oom = loglines.CUDA_OOM.format(
            alloc_gib=max(result.reserve_estimate_gb - avail_gb, 0.5),
            gpu=0,
            total_gib=result.gpu.memory_gb,
            free_mib=OOM_FREE_MIB,
        )
        failed = loglines.CAPTURE_FAILED.render(
            e=oom, CUDA_GRAPH_CAPTURE_FAILED_MSG=loglines.CAPTURE_FAILED_ADVICE.text
        )
        frames = [scheduler_frame(), frame("capture_failed", "raise Exception(")]
        self._fail(traceback_text(frames, "Exception: " + failed), PHASE_CUDA_GRAPH)


def banner(config: SimConfig) -> str:
    faults = ", ".join(config.faults.names()) or "none"
    return (
        f"sglnode sim: SIMULATED SGLang {SGLANG_VERSION} server (a test double: no GPU, no model; "
        f"every number it reports is simulated). gpu={config.gpu} model={config.model_preset} "
        f"time_scale={config.time_scale:g} faults={faults}"
    )
