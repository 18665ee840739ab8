"""The sweep spec: a base topology, the axes to vary, the bench, the SLO and the budgets (YAML).

Validated strictly: an unknown key anywhere is refused (a misspelt `max_itl_p99_ms` must not
silently drop the SLO), values are not coerced across types, and every problem is listed with its
path. Relative paths are relative to the spec file. docs/tune.md documents every key.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from sglnode.pins import PINS

# Candidate topology names are `tune-<sweep>-<8 hex>`: the validator's name rule allows 63 characters.
SWEEP_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,39}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The decode band: all-reduce sizes a decode step sends (batch x hidden x 2 bytes, batch 1..128 for a
# 4096-7168 hidden size), the sizes that decide decode latency on a PCIe node.
DEFAULT_DECODE_BAND_BYTES = (4096, 2 << 20)

PositiveInt = Annotated[int, Field(ge=1)]
PositiveFloat = Annotated[float, Field(gt=0)]


class SpecError(ValueError):
    """The spec cannot be used; `problems` lists each one as 'path: message'."""

    def __init__(self, source: str, problems: list[str]) -> None:
        super().__init__(f"{source}: " + "; ".join(problems))
        self.source = source
        self.problems = problems


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SpeculativeSpec(_Strict):
    algorithm: str
    num_steps: PositiveInt | None = None
    eagle_topk: PositiveInt | None = None
    num_draft_tokens: PositiveInt | None = None
    draft_model_path: str | None = None

    def as_topology(self) -> dict[str, Any]:
        return {k: v for k, v in self.model_dump().items() if v is not None}


class Axes(_Strict):
    """Each axis is a list of values; an empty axis is not varied (the base topology's value stays)."""

    topologies: list[str] = []
    nccl: dict[str, dict[str, str | int]] = {}
    cuda_graph_max_bs_decode: list[PositiveInt] = []
    chunked_prefill_size: list[int] = []
    # null (or false) = speculative decoding off; a mapping = on, with its steps.
    speculative: list[SpeculativeSpec | Literal[False] | None] = []
    attention_backend: list[str] = []
    moe_runner_backend: list[str] = []
    mem_fraction_static: list[Annotated[float, Field(gt=0, lt=1)]] = []

    @field_validator("nccl")
    @classmethod
    def _env_names(cls, value: dict[str, dict[str, str | int]]) -> dict[str, dict[str, str | int]]:
        for variant, env in value.items():
            if not SWEEP_NAME.match(variant):
                raise ValueError(f"variant name {variant!r}: lowercase letters, digits and '-'")
            bad = [name for name in env if not ENV_NAME.match(name)]
            if bad:
                raise ValueError(f"variant {variant}: {bad} are not environment variable names")
        return value

    @field_validator("chunked_prefill_size")
    @classmethod
    def _chunked(cls, value: list[int]) -> list[int]:
        # SGLang: -1 disables chunked prefill; otherwise a positive token count.
        if any(v == 0 or v < -1 for v in value):
            raise ValueError("chunked_prefill_size values are token counts >= 1, or -1 (off)")
        return value


class BenchSpec(_Strict):
    api: Literal["generate", "completions", "chat"] = "chat"
    concurrency: list[PositiveInt] = [1, 16, 64]
    num_requests: PositiveInt = 128
    duration_s: PositiveFloat = 120.0
    input_len: PositiveInt = 1024
    output_len: PositiveInt = 256
    warmup: Annotated[int, Field(ge=0)] = 4


class SloSpec(_Strict):
    """The winner: the best `objective` over the stages that meet every limit."""

    objective: Literal["output_tok_s", "output_tok_s_per_gpu"] = "output_tok_s"
    max_ttft_p99_ms: PositiveFloat | None = None
    max_itl_p99_ms: PositiveFloat | None = None
    max_error_rate: Annotated[float, Field(ge=0, le=1)] = 0.0


class BudgetSpec(_Strict):
    """Seconds. `candidate_s` bounds one candidate end to end (startup, bench, teardown)."""

    candidate_s: PositiveFloat = 2700.0
    startup_s: PositiveFloat = 1800.0
    teardown_s: PositiveFloat = 150.0
    # A bench stage shorter than this measures nothing useful: the candidate stops as over budget.
    min_stage_s: PositiveFloat = 5.0


class NcclMeasurements(_Strict):
    """The all-reduce sweep's JSON (tools/gpu/tune-node.sh): it orders (and with `top`, trims) the
    NCCL variants by their latency in the decode band for each candidate's TP size."""

    file: str
    top: PositiveInt | None = None
    band_bytes: list[PositiveInt] = list(DEFAULT_DECODE_BAND_BYTES)

    @model_validator(mode="after")
    def _band(self) -> NcclMeasurements:
        if len(self.band_bytes) != 2 or self.band_bytes[0] > self.band_bytes[1]:
            raise ValueError("band_bytes: [low, high] with low <= high")
        return self


class SimSpec(_Strict):
    """Simulated runtime only (sglnode sim, a test double): its pace and startup time."""

    time_scale: Annotated[float, Field(ge=0)] = 1.0
    startup_s: Annotated[float, Field(ge=0)] = 3.0


class Images(_Strict):
    sglang: str | None = None
    router: str | None = None
    sim: str | None = None


class SweepSpec(_Strict):
    name: str
    description: str = ""
    base: str
    runtime: Literal["real", "sim"] = "real"
    gpu: str = PINS.gpu.preset
    bind_address: str = "127.0.0.1"
    # one-at-a-time: the base, then each axis value alone on the base; grid: every combination.
    strategy: Literal["one-at-a-time", "grid"] = "one-at-a-time"
    max_candidates: PositiveInt = 24
    # Server names the server-level axes apply to (empty: every server).
    apply_to: list[str] = []
    axes: Axes = Axes()
    bench: BenchSpec = BenchSpec()
    slo: SloSpec = SloSpec()
    budget: BudgetSpec = BudgetSpec()
    # refuse: a candidate the planner says cannot fit is not deployed; warn: deploy it anyway (the
    # planner is an estimate) and let the readiness waiter diagnose the crash.
    memory_preflight: Literal["refuse", "warn"] = "refuse"
    kernel_audit: str | None = None
    nccl_measurements: NcclMeasurements | None = None
    # A MoE config cache root (tools/gpu/tune-node.sh): mounted read-only as SGLANG_MOE_CONFIG_DIR.
    moe_config_dir: str | None = None
    sim: SimSpec = SimSpec()
    images: Images = Images()
    winner_name: str | None = None

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not SWEEP_NAME.match(value):
            raise ValueError("lowercase letters, digits and '-', at most 40 characters")
        return value

    @field_validator("winner_name")
    @classmethod
    def _winner_name(cls, value: str | None) -> str | None:
        if value is not None and not re.match(r"^[a-z0-9][a-z0-9-]{0,62}$", value):
            raise ValueError("a topology name: lowercase letters, digits and '-'")
        return value


class LoadedSpec(BaseModel):
    """A validated spec with where it came from (paths resolved against its directory)."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    spec: SweepSpec
    path: Path
    sha256: str

    def resolve(self, relative: str) -> Path:
        candidate = Path(relative)
        return candidate if candidate.is_absolute() else (self.path.parent / candidate).resolve()


def _format_error(error: dict[str, Any]) -> str:
    where = ".".join(str(part) for part in error["loc"]) or "(top level)"
    if error["type"] == "extra_forbidden":
        return f"{where}: unknown key (not part of the sweep spec; see docs/tune.md)"
    return f"{where}: {error['msg']}"


def parse_spec(data: Any, source: str = "<spec>") -> SweepSpec:
    if not isinstance(data, dict):
        raise SpecError(source, ["the spec is not a YAML mapping"])
    try:
        return SweepSpec.model_validate(data)
    except ValidationError as exc:
        # Union members each report; keep one message per location and text.
        problems = list(dict.fromkeys(_format_error(e) for e in exc.errors()))
        raise SpecError(source, problems) from None


def load_spec(path: Path) -> LoadedSpec:
    try:
        raw = path.read_bytes()
        data = yaml.safe_load(raw)
    except (OSError, yaml.YAMLError) as exc:
        raise SpecError(str(path), [f"cannot read: {exc}"]) from exc
    spec = parse_spec(data, str(path))
    loaded = LoadedSpec(spec=spec, path=path.resolve(), sha256=hashlib.sha256(raw).hexdigest())
    missing = [
        f"{key}: {loaded.resolve(value)} does not exist"
        for key, value in [("base", spec.base)]
        + [(f"axes.topologies[{i}]", t) for i, t in enumerate(spec.axes.topologies)]
        + ([("nccl_measurements.file", spec.nccl_measurements.file)] if spec.nccl_measurements else [])
        + ([("kernel_audit", spec.kernel_audit)] if spec.kernel_audit else [])
        + ([("moe_config_dir", spec.moe_config_dir)] if spec.moe_config_dir else [])
        if not loaded.resolve(value).exists()
    ]
    if missing:
        raise SpecError(str(path), missing)
    return loaded
