"""SGLang's startup sequence, replayed from the planner's memory model, and SGLang's ways of dying.

The milestones and failure lines are the format strings in `sglnode.loglines` (copied from SGLang),
so `sglnode wait` / `sglnode diagnose` read the simulator exactly as they read SGLang.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

from sglnode import loglines
from sglnode.planner import (
    PHASE_CUDA_GRAPH,
    PHASE_KV_CACHE,
    PHASE_WEIGHTS,
    PlanResult,
    plan,
    resolve_model,
)
from sglnode.presets import load_gpu
from sglnode.sim.config import SGLANG_VERSION, SimConfig
from sglnode.sim.log import SimLog

# Share of SGLNODE_SIM_STARTUP_S each phase takes (weight loading dominates on a real node);
# the rest goes to the HTTP server and its warmup request.
PHASE_SHARE = {"init": 0.1, "weights": 0.5, "kv": 0.05, "graphs": 0.25}
# Batch sizes SGLang captures up to cuda_graph_max_bs (server_args.py default list shape).
SMALL_CAPTURE_BS = (1, 2, 4, 8, 12)
CAPTURE_BS_STEP = 8
DEFAULT_MAX_PREFILL_TOKENS = 16384  # server_args.py default for --max-prefill-tokens
SCHEDULER_FILE = "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py"
RUNNER_FILE = "/usr/local/lib/python3.12/dist-packages/sglang/srt/model_executor/model_runner.py"
# What a failed allocation typically reports: one weight shard in flight, a few MiB left free.
WEIGHT_SHARD_ALLOC_GIB = 3.5
OOM_FREE_MIB = 18.56
EXIT_SIGKILLED = 128 + signal.SIGKILL
SIGKILL_GRACE_S = 0.1
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."
# After SGLang's cuda_graph_runner.py: the generic advice it appends to every capture failure.
CUDA_GRAPH_ADVICE = (
    "Possible solutions:\n"
    "1. set --mem-fraction-static to a smaller value (e.g., 0.8 or 0.7)\n"
    "2. set --cuda-graph-max-bs-decode to a smaller value (e.g., 16)\n"
    "3. disable torch compile by not using --enable-torch-compile\n"
    "4. disable CUDA graph by --cuda-graph-backend-decode disabled. "
    "(Not recommended. Huge performance loss)\n"
    "Open an issue on GitHub https://github.com/sgl-project/sglang/issues/new/choose \n"
)
NCCL_ERROR = (
    "torch.distributed.DistBackendError: NCCL error in: "
    "/pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3356, unhandled system error "
    "(run with NCCL_DEBUG=INFO for details), NCCL version 2.27.7\n"
    "ncclSystemError: System call (e.g. socket, malloc) or external library call failed or device error."
)


class StartupFailed(Exception):
    """The simulated server died during init (the log already says why)."""

    def __init__(self, phase: str) -> None:
        super().__init__(phase)
        self.phase = phase


def capture_batch_sizes(max_bs: int) -> list[int]:
    sizes = [bs for bs in SMALL_CAPTURE_BS if bs <= max_bs]
    sizes += list(range(16, max_bs + 1, CAPTURE_BS_STEP))
    if max_bs and (not sizes or sizes[-1] != max_bs):
        sizes.append(max_bs)
    return sizes


def plan_for(config: SimConfig) -> PlanResult:
    model = resolve_model({"preset": config.model_preset, "weights_gb": config.weights_gb})
    return plan(model, load_gpu(config.gpu), config.server_spec())


def kill_self() -> None:
    """How SGLang's launcher ends: kill_process_tree(include_parent=True) SIGKILLs itself."""
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)
    # Still here: we are PID 1 in a container, which ignores its own SIGKILL. Exit as a shell
    # reports a SIGKILLed process (128 + 9), which is what `docker` shows for SGLang too.
    time.sleep(SIGKILL_GRACE_S)
    os._exit(EXIT_SIGKILLED)


def _traceback(frames: list[tuple[str, int, str, str]], error: str) -> str:
    lines = ["Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(error)
    return "\n".join(lines)


SCHEDULER_FRAME = (SCHEDULER_FILE, 3183, "run_scheduler_process", "scheduler = Scheduler(")


@dataclass
class Startup:
    config: SimConfig
    log: SimLog
    sleep: Callable[[float], None] = time.sleep
    die: Callable[[], None] = kill_self

    def _pause(self, phase: str) -> None:
        self.sleep(self.config.startup_s * PHASE_SHARE[phase])

    def _fail(self, traceback_text: str, phase: str) -> None:
        self.log.info(loglines.SCHEDULER_EXCEPTION.format(traceback=traceback_text))
        self.log.info(SIGQUIT_LINE, rank_tag="")
        pid = os.getpid()
        self.log.info(
            loglines.KILL_PROCESS_TREE.format(parent_pid=pid, include_parent=True, pid=pid), rank_tag=""
        )
        self.die()
        raise StartupFailed(phase)

    def run(self) -> PlanResult:
        """Print the startup lines; returns the plan, or dies the way SGLang does."""
        result = plan_for(self.config)
        self._init_distributed(result)
        self._load_weights(result)
        avail_gb = self._allocate_kv_cache(result)
        if result.server.cuda_graph_max_bs:
            avail_gb = self._capture_cuda_graphs(result, avail_gb)
        server = result.server
        self.log.info(
            loglines.MAX_TOTAL_NUM_TOKENS.format(
                tokens=result.kv_tokens,
                chunked_prefill_size=server.chunked_prefill_size,
                max_prefill_tokens=DEFAULT_MAX_PREFILL_TOKENS,
                max_running_requests=self.max_running_requests(result),
                context_len=result.context_length,
                avail_gb=avail_gb,
            )
        )
        return result

    def _init_distributed(self, result: PlanResult) -> None:
        for rank in range(result.server.tp):
            self.log.info(loglines.INIT_DISTRIBUTED_BEGIN, rank_tag=f"TP{rank}")
        self._pause("init")
        if self.config.faults.nccl_init:
            frame = (RUNNER_FILE, 742, "init_torch_distributed", "initialize_model_parallel(")
            self._fail(_traceback([SCHEDULER_FRAME, frame], NCCL_ERROR), "nccl")
        self.log.info(
            loglines.INIT_DISTRIBUTED_END.format(
                elapsed_s=self.config.startup_s * PHASE_SHARE["init"],
                mem_usage_gb=result.gpu.memory_gb - result.pre_load_free_gb,
            )
        )

    def _load_weights(self, result: PlanResult) -> None:
        self.log.info(loglines.LOAD_WEIGHT_BEGIN.format(avail_gb=result.pre_load_free_gb))
        if self.config.faults.hang:
            self._hang()
        self._pause("weights")
        if PHASE_WEIGHTS in {result.failure_phase, self.config.faults.oom_phase}:
            self._oom_in_weights(result)
        self.log.info(
            loglines.LOAD_WEIGHT_END.format(
                elapsed_s=self.config.startup_s * PHASE_SHARE["weights"],
                model_class=result.model.architecture or "Model",
                avail_gb=result.avail_after_weights_gb,
                mem_usage_gb=result.weights_per_gpu_gb,
            )
        )

    def _allocate_kv_cache(self, result: PlanResult) -> float:
        """Returns the free memory left after the KV pool."""
        self._pause("kv")
        if PHASE_KV_CACHE in {result.failure_phase, self.config.faults.oom_phase}:
            self._kv_budget_error(result)
        half_gb = result.kv_pool_gb / 2
        self.log.info(loglines.KV_CACHE_ALLOCATED.format(tokens=result.kv_tokens, k_gb=half_gb, v_gb=half_gb))
        avail_gb = result.avail_after_weights_gb - result.kv_pool_gb
        self.log.info(loglines.MEMORY_POOL_END.format(avail_gb=avail_gb))
        return avail_gb

    def _capture_cuda_graphs(self, result: PlanResult, avail_gb: float) -> float:
        """Returns the free memory left after capture."""
        sizes = capture_batch_sizes(result.server.cuda_graph_max_bs)
        self.log.info(loglines.CUDA_GRAPH_BEGIN.format(batch_sizes=sizes, avail_gb=avail_gb))
        self._pause("graphs")
        if PHASE_CUDA_GRAPH in {result.failure_phase, self.config.faults.oom_phase}:
            self._cuda_graph_oom(result, avail_gb)
        # The graph pool takes part of the runtime reserve; the rest stays for activations.
        graph_gb = min(result.runtime_need_gb, avail_gb) / 2
        self.log.info(
            loglines.CUDA_GRAPH_END.format(
                elapsed_s=self.config.startup_s * PHASE_SHARE["graphs"],
                mem_usage_gb=graph_gb,
                avail_gb=avail_gb - graph_gb,
            )
        )
        return avail_gb - graph_gb

    def max_running_requests(self, result: PlanResult) -> int:
        """SGLang's default: tokens / context_len * 512, clamped to [2048, 4096] (init_memory)."""
        if self.config.max_running_requests:
            return self.config.max_running_requests
        derived = int(result.kv_tokens / max(result.context_length, 1) * 512)
        return min(max(derived, 2048), 4096)

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
        frame = (RUNNER_FILE, 1021, "load_model", "self.model = get_model(")
        self._fail(_traceback([SCHEDULER_FRAME, frame], error), PHASE_WEIGHTS)

    def _kv_budget_error(self, result: PlanResult) -> None:
        fraction = result.server.mem_fraction_static
        error = f"{loglines.NOT_ENOUGH_MEMORY} Current value: mem_fraction_static={fraction}"
        frame = (
            RUNNER_FILE,
            1893,
            "init_memory_pool",
            "self.memory_pool_config = self._resolve_memory_pool_config(",
        )
        self._fail(_traceback([SCHEDULER_FRAME, frame], error), PHASE_KV_CACHE)

    def _cuda_graph_oom(self, result: PlanResult, avail_gb: float) -> None:
        oom = loglines.CUDA_OOM.format(
            alloc_gib=max(result.runtime_need_gb - avail_gb, 0.5),
            gpu=0,
            total_gib=result.gpu.memory_gb,
            free_mib=OOM_FREE_MIB,
        )
        error = f"Exception: Capture cuda graph failed: {oom}\n{CUDA_GRAPH_ADVICE}"
        frame = (RUNNER_FILE, 2270, "init_device_graphs", "self.graph_runner = CudaGraphRunner(self)")
        self._fail(_traceback([SCHEDULER_FRAME, frame], error), PHASE_CUDA_GRAPH)


def banner(config: SimConfig) -> str:
    faults = ", ".join(config.faults.names()) or "none"
    return (
        f"sglnode sim: SIMULATED SGLang {SGLANG_VERSION} server (a test double: no GPU, no model; "
        f"every number it reports is simulated). gpu={config.gpu} model={config.model_preset} "
        f"time_scale={config.time_scale:g} faults={faults}"
    )
