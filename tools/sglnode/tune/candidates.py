"""Expand a sweep spec into candidate topologies, and vet each before anything is deployed.

A candidate is a topology mapping (the base, or one of `axes.topologies`) with overrides applied to
its servers. Its id hashes everything that decides its result (the topology content, the overrides,
the NCCL env, the bench settings, the runtime), so a resumed sweep reuses exactly the candidates whose
result would not change, and a changed SLO re-ranks finished candidates without rerunning them.

Vetting, in order, each recorded with its reason: the topology validator (invalid), the kernel audit
(a backend without sm_120 kernels, or one SGLang refuses on sm_120), the planner's memory preflight
(refused, or deployed anyway under `memory_preflight: warn`).
"""

from __future__ import annotations

import copy
import hashlib
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglnode.topology.check import check_topology
from sglnode.topology.kernels import KernelAudit, check_kernels
from sglnode.topology.memory import check_memory
from sglnode.topology.model import Topology, read_topology_file
from sglnode.tune.nccl import NcclChoice, choose_variants, load_measurements
from sglnode.tune.spec import LoadedSpec, SpeculativeSpec

# Server-level axes, in the order a label shows them.
SERVER_AXES = (
    "mem_fraction_static",
    "cuda_graph_max_bs_decode",
    "chunked_prefill_size",
    "speculative",
    "attention_backend",
    "moe_runner_backend",
)
SHORT = {
    "topology": "topo",
    "nccl": "nccl",
    "mem_fraction_static": "mem",
    "cuda_graph_max_bs_decode": "cg-bs",
    "chunked_prefill_size": "chunk",
    "speculative": "spec",
    "attention_backend": "attn",
    "moe_runner_backend": "moe",
}
ID_LENGTH = 10
# Vetting verdicts that keep a candidate from being deployed.
NOT_DEPLOYED = ("invalid", "refused_kernels", "refused_memory")


@dataclass
class Candidate:
    id: str
    label: str
    source: str  # topology file the candidate starts from
    overrides: dict[str, Any]
    data: dict[str, Any]  # the topology mapping to deploy (named tune-<sweep>-<id>)
    verdict: str = "pending"  # pending | invalid | refused_kernels | refused_memory
    reasons: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    topology: Topology | None = None

    @property
    def deployable(self) -> bool:
        return self.verdict not in NOT_DEPLOYED

    @property
    def gpus(self) -> int:
        return sum(s.gpu_count for s in self.topology.servers) if self.topology else 0

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "label": self.label,
            "source": self.source,
            "overrides": self.overrides,
            "verdict": self.verdict,
            "reasons": self.reasons,
            "notes": self.notes,
            "gpus": self.gpus,
            "topology": self.data,
        }


def _speculative_value(value: SpeculativeSpec | bool | None) -> dict[str, Any] | None:
    return value.as_topology() if isinstance(value, SpeculativeSpec) else None


def _label_value(axis: str, value: Any) -> str:
    if axis == "speculative":
        if not value:
            return "off"
        steps = value.get("num_steps")
        return f"{value['algorithm'].lower()}" + (f"-{steps}" if steps else "")
    return str(value)


def apply_overrides(
    data: dict[str, Any], overrides: dict[str, Any], nccl_env: dict[str, str], apply_to: list[str]
) -> dict[str, Any]:
    """A deep copy of the topology mapping with the server axes set on the targeted servers."""
    out = copy.deepcopy(data)
    if nccl_env:
        out["nccl"] = {**(out.get("nccl") or {}), **nccl_env}
    for server in out.get("servers") or []:
        if not isinstance(server, dict) or (apply_to and server.get("name") not in apply_to):
            continue
        for axis in SERVER_AXES:
            if axis not in overrides:
                continue
            value = overrides[axis]
            if axis == "moe_runner_backend":
                args = dict(server.get("args") or {})
                args["moe_runner_backend"] = value
                server["args"] = args
            else:
                # An explicit None (speculative off) also beats a server_defaults entry.
                server[axis] = value
    return out


def candidate_id(payload: dict[str, Any]) -> str:
    text = json.dumps(payload, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:ID_LENGTH]


def _axis_values(loaded: LoadedSpec) -> dict[str, list[Any]]:
    axes = loaded.spec.axes
    values: dict[str, list[Any]] = {}
    for axis in SERVER_AXES:
        raw = getattr(axes, axis)
        if raw:
            values[axis] = [_speculative_value(v) for v in raw] if axis == "speculative" else list(raw)
    return values


def nccl_choice(loaded: LoadedSpec, base: dict[str, Any]) -> NcclChoice:
    spec = loaded.spec
    declared = {name: {k: str(v) for k, v in env.items()} for name, env in spec.axes.nccl.items()}
    measured = None
    band: list[int] = []
    top = None
    if spec.nccl_measurements is not None:
        measured = load_measurements(loaded.resolve(spec.nccl_measurements.file))
        band, top = spec.nccl_measurements.band_bytes, spec.nccl_measurements.top
    tp = max((int(s.get("tp", 1)) for s in base.get("servers") or [] if isinstance(s, dict)), default=1)
    return choose_variants(declared, measured, tp, band or [0, 0], top)


def _combinations(loaded: LoadedSpec, nccl: NcclChoice) -> list[tuple[str, dict[str, Any], str | None]]:
    """(topology file, server overrides, NCCL variant) for every candidate the strategy asks for."""
    spec = loaded.spec
    files = [spec.base, *spec.axes.topologies]
    axes = _axis_values(loaded)
    variants: list[str | None] = [name for name, _ in nccl.variants] or [None]
    if spec.strategy == "grid":
        names = list(axes)
        combos = []
        for topology, variant in itertools.product(files, variants):
            for values in itertools.product(*(axes[n] for n in names)):
                combos.append((topology, dict(zip(names, values, strict=True)), variant))
        return combos
    combos: list[tuple[str, dict[str, Any], str | None]] = [(spec.base, {}, variants[0])]
    combos += [(topology, {}, variants[0]) for topology in spec.axes.topologies]
    combos += [(spec.base, {}, variant) for variant in variants[1:]]
    for axis, values in axes.items():
        combos += [(spec.base, {axis: value}, variants[0]) for value in values]
    return combos


def expand(loaded: LoadedSpec) -> tuple[list[Candidate], NcclChoice, list[str]]:
    """Candidates in run order (duplicates removed), the NCCL choice, and notes (e.g. truncation)."""
    spec = loaded.spec
    sources = {f: read_topology_file(loaded.resolve(f)) for f in [spec.base, *spec.axes.topologies]}
    nccl = nccl_choice(loaded, sources[spec.base])
    envs = dict(nccl.variants)
    candidates: list[Candidate] = []
    seen: set[str] = set()
    for source, overrides, variant in _combinations(loaded, nccl):
        env = envs.get(variant, {}) if variant else {}
        data = apply_overrides(sources[source], overrides, env, spec.apply_to)
        identity = {
            "topology": data,
            "runtime": spec.runtime,
            "gpu": spec.gpu,
            "bench": spec.bench.model_dump(),
            "sim": spec.sim.model_dump() if spec.runtime == "sim" else None,
            "moe_config_dir": spec.moe_config_dir,
            "images": spec.images.model_dump(),
        }
        cid = candidate_id(identity)
        if cid in seen:
            continue
        seen.add(cid)
        shown = {**({"topology": Path(source).stem} if source != spec.base else {})}
        if variant:
            shown["nccl"] = variant
        shown.update(overrides)
        label = " ".join(f"{SHORT[k]}={_label_value(k, v)}" for k, v in shown.items()) or "base"
        data["name"] = f"tune-{spec.name}-{cid[:8]}"
        data["description"] = f"sweep {spec.name} candidate {cid}: {label}"
        candidates.append(
            Candidate(
                id=cid,
                label=label,
                source=str(loaded.resolve(source)),
                overrides={**({"nccl": variant} if variant else {}), **overrides},
                data=data,
            )
        )
    notes = []
    if len(candidates) > spec.max_candidates:
        notes.append(
            f"{len(candidates) - spec.max_candidates} candidate(s) beyond max_candidates "
            f"({spec.max_candidates}) were not run"
        )
        candidates = candidates[: spec.max_candidates]
    return candidates, nccl, notes


def vet(candidate: Candidate, audit: KernelAudit | None, gpu: str, memory_preflight: str) -> Candidate:
    """Set the candidate's verdict from the validator, the kernel audit and the memory planner."""
    topology, problems = check_topology(candidate.data)
    candidate.topology = topology
    if problems:
        candidate.verdict = "invalid"
        candidate.reasons = [str(p) for p in problems]
        return candidate
    if audit is not None:
        findings, kernel_problems = check_kernels(topology, audit)
        candidate.notes += [
            f"{f.server}: {f.field} {f.choice} is unverified on sm_120: {f.detail}"
            for f in findings
            if f.verdict == "unverified"
        ]
        if kernel_problems:
            candidate.verdict = "refused_kernels"
            candidate.reasons = [str(p) for p in kernel_problems]
            return candidate
    _, memory_problems = check_memory(topology, gpu)
    if memory_problems:
        messages = [str(p) for p in memory_problems]
        if memory_preflight == "refuse":
            candidate.verdict = "refused_memory"
            candidate.reasons = messages
            return candidate
        candidate.notes += [f"the planner predicts it does not fit (deployed anyway): {m}" for m in messages]
    candidate.verdict = "deploy"
    return candidate
