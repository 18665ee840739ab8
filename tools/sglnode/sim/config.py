"""The simulator's settings: SGLang's flags as parsed, plus sim-only knobs from SGLNODE_SIM_* env vars.

Sim-only knobs live in the environment so the command line stays exactly SGLang's.
"""

from __future__ import annotations

import argparse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from sglnode.pins import PINS
from sglnode.topology.model import Server, Speculative

SGLANG_VERSION = PINS.sglang
DEFAULT_GPU = PINS.gpu.preset
DEFAULT_MODEL = "deepseek-v4-flash-fp4"
DEFAULT_PORT = PINS.ports.sglang  # server_args.py default
DEFAULT_HOST = "127.0.0.1"  # server_args.py default
DEFAULT_BOOTSTRAP_PORT = PINS.ports.bootstrap  # server_args.py default for --disaggregation-bootstrap-port
DEFAULT_STARTUP_S = 3.0
DEFAULT_SLOW_STREAM_FACTOR = 10.0

ENV_HELP = {
    "SGLNODE_SIM_GPU": f"GPU preset to simulate (default {DEFAULT_GPU})",
    "SGLNODE_SIM_MODEL": f"model preset to simulate (default {DEFAULT_MODEL}, whatever --model-path says)",
    "SGLNODE_SIM_WEIGHTS_GB": "override the preset's total weight size (GB = 2**30 bytes)",
    "SGLNODE_SIM_TIME_SCALE": "multiplies every roofline token/prefill delay (default 1; 0 = no delay)",
    "SGLNODE_SIM_STARTUP_S": f"wall seconds the startup sequence takes (default {DEFAULT_STARTUP_S})",
    "SGLNODE_SIM_FAULT": (
        "comma-separated faults: crash_after_s:N | crash_after_requests:N | "
        "oom:weights|kv_cache|cuda_graph | nccl_init | hang | slow_stream[:FACTOR] | kv_transfer_fail"
    ),
}
FAULT_KINDS = (
    "crash_after_s",
    "crash_after_requests",
    "oom",
    "nccl_init",
    "hang",
    "slow_stream",
    "kv_transfer_fail",
)
OOM_PHASES = ("weights", "kv_cache", "cuda_graph")


class SimConfigError(ValueError):
    """Bad SGLNODE_SIM_* settings; the message names the variable."""


@dataclass(frozen=True)
class Faults:
    crash_after_s: float | None = None
    crash_after_requests: int | None = None
    oom_phase: str | None = None
    nccl_init: bool = False
    hang: bool = False
    slow_stream_factor: float = 1.0
    kv_transfer_fail: bool = False

    def names(self) -> list[str]:
        active = []
        if self.crash_after_s is not None:
            active.append(f"crash_after_s:{self.crash_after_s:g}")
        if self.crash_after_requests is not None:
            active.append(f"crash_after_requests:{self.crash_after_requests}")
        if self.oom_phase:
            active.append(f"oom:{self.oom_phase}")
        if self.nccl_init:
            active.append("nccl_init")
        if self.hang:
            active.append("hang")
        if self.slow_stream_factor != 1.0:
            active.append(f"slow_stream:{self.slow_stream_factor:g}")
        if self.kv_transfer_fail:
            active.append("kv_transfer_fail")
        return active


def parse_faults(text: str) -> Faults:
    values: dict[str, Any] = {}
    for raw in (part.strip() for part in text.split(",")):
        if not raw:
            continue
        kind, _, arg = raw.partition(":")
        if kind not in FAULT_KINDS:
            raise SimConfigError(
                f"SGLNODE_SIM_FAULT: unknown fault {kind!r}; known: {', '.join(FAULT_KINDS)}"
            )
        try:
            if kind == "crash_after_s":
                values["crash_after_s"] = float(arg)
            elif kind == "crash_after_requests":
                values["crash_after_requests"] = int(arg)
            elif kind == "slow_stream":
                values["slow_stream_factor"] = float(arg) if arg else DEFAULT_SLOW_STREAM_FACTOR
            elif kind == "oom":
                if arg not in OOM_PHASES:
                    raise SimConfigError(f"SGLNODE_SIM_FAULT: oom needs a phase: {', '.join(OOM_PHASES)}")
                values["oom_phase"] = arg
            else:
                values[kind] = True
        except ValueError as exc:
            if isinstance(exc, SimConfigError):
                raise
            raise SimConfigError(f"SGLNODE_SIM_FAULT: {raw!r} needs a number after ':'") from exc
    return Faults(**values)


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    text = env.get(name, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError as exc:
        raise SimConfigError(f"{name}={text!r} is not a number") from exc
    if value < 0:
        raise SimConfigError(f"{name} must be >= 0")
    return value


def _int(value: Any, default: int) -> int:
    return int(value) if value not in (None, "") else default


@dataclass(frozen=True)
class SimConfig:
    args: dict[str, Any]
    gpu: str = DEFAULT_GPU
    model_preset: str = DEFAULT_MODEL
    weights_gb: float | None = None
    time_scale: float = 1.0
    startup_s: float = DEFAULT_STARTUP_S
    faults: Faults = field(default_factory=Faults)

    # --- SGLang flags the simulator acts on ---
    @property
    def host(self) -> str:
        return self.args.get("host") or DEFAULT_HOST

    @property
    def port(self) -> int:
        return _int(self.args.get("port"), DEFAULT_PORT)

    @property
    def model_path(self) -> str:
        return str(self.args["model_path"])

    @property
    def served_model_name(self) -> str:
        return self.args.get("served_model_name") or self.model_path

    @property
    def disaggregation_mode(self) -> str:
        return self.args.get("disaggregation_mode") or "null"

    @property
    def bootstrap_port(self) -> int:
        return _int(self.args.get("disaggregation_bootstrap_port"), DEFAULT_BOOTSTRAP_PORT)

    @property
    def metrics_enabled(self) -> bool:
        return bool(self.args.get("enable_metrics"))

    @property
    def cache_report(self) -> bool:
        """--enable-cache-report: OpenAI usage carries prompt_tokens_details.cached_tokens."""
        return bool(self.args.get("enable_cache_report"))

    @property
    def radix_cache_disabled(self) -> bool:
        return bool(self.args.get("disable_radix_cache"))

    @property
    def api_key(self) -> str | None:
        return self.args.get("api_key") or None

    @property
    def skip_warmup(self) -> bool:
        return bool(self.args.get("skip_server_warmup"))

    @property
    def max_running_requests(self) -> int | None:
        value = self.args.get("max_running_requests")
        return int(value) if value else None

    @property
    def decode_graph_disabled(self) -> bool:
        return (
            bool(self.args.get("disable_cuda_graph"))
            or self.args.get("cuda_graph_backend_decode") == "disabled"
        )

    def server(self) -> Server:
        """The server these flags launch, in the topology's one server model."""
        algorithm = self.args.get("speculative_algorithm")
        speculative = (
            Speculative(
                algorithm=str(algorithm).upper(),
                num_steps=_int(self.args.get("speculative_num_steps"), 0) or None,
                eagle_topk=_int(self.args.get("speculative_eagle_topk"), 0) or None,
                num_draft_tokens=_int(self.args.get("speculative_num_draft_tokens"), 0) or None,
                draft_model_path=self.args.get("speculative_draft_model_path") or None,
            )
            if algorithm
            else None
        )
        fraction = self.args.get("mem_fraction_static")
        mode = self.args.get("disaggregation_mode") or "null"
        return Server(
            name=self.served_model_name,
            role=mode if mode in ("prefill", "decode") else "regular",
            tp=_int(self.args.get("tp_size"), 1),
            dp=_int(self.args.get("dp_size"), 1),
            ep=_int(self.args.get("ep_size"), 1),
            port=self.port,
            mem_fraction_static=float(fraction) if fraction else None,
            kv_cache_dtype=self.args.get("kv_cache_dtype") or None,
            context_length=_int(self.args.get("context_length"), 0) or None,
            chunked_prefill_size=_int(self.args.get("chunked_prefill_size"), 0) or None,
            cuda_graph_max_bs_decode=_int(self.args.get("cuda_graph_max_bs_decode"), 0) or None,
            speculative=speculative,
            args={"max_running_requests": self.max_running_requests} if self.max_running_requests else {},
        )


def build_config(namespace: argparse.Namespace, env: Mapping[str, str]) -> SimConfig:
    weights = env.get("SGLNODE_SIM_WEIGHTS_GB", "").strip()
    return SimConfig(
        args=vars(namespace),
        gpu=env.get("SGLNODE_SIM_GPU", "").strip() or DEFAULT_GPU,
        model_preset=env.get("SGLNODE_SIM_MODEL", "").strip() or DEFAULT_MODEL,
        weights_gb=_env_float(env, "SGLNODE_SIM_WEIGHTS_GB", 0.0) if weights else None,
        time_scale=_env_float(env, "SGLNODE_SIM_TIME_SCALE", 1.0),
        startup_s=_env_float(env, "SGLNODE_SIM_STARTUP_S", DEFAULT_STARTUP_S),
        faults=parse_faults(env.get("SGLNODE_SIM_FAULT", "")),
    )
