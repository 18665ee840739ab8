"""Will the kernels a topology's backend choices load run on this node's GPU?

Each server's choices (attention backend, or the one SGLang picks on sm_120 for its model; MoE runner,
quantization, FP8/FP4 GEMM backends, speculative algorithm, KV transfer backend) are looked up in
kernels.yaml (what SGLang 0.5.23 loads for each, with sources) and checked against the image's kernel
audit (/opt/sglnode/kernel-audit.json, written by images/sglang/kernel_audit.py at build time; a copy
of the last build's ships here as kernel-audit.json). A choice whose kernels carry no sm_120 SASS or
PTX, that the image lacks, or that SGLang itself refuses on sm_120 is a problem, named with the
library and the architectures it does carry.
"""

from __future__ import annotations

import fnmatch
import json
import re
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sglnode.planning.presets import PresetError, load_model_preset
from sglnode.topology.flags import load_catalog
from sglnode.topology.model import Problem, Server, Topology

# Where a server's choice lives: its own field, or a flag in `args` (snake_case, as topologies write it).
FIELD_SOURCES: dict[str, tuple[str, ...]] = {
    "attention_backend": ("attention_backend", "prefill_attention_backend", "decode_attention_backend"),
    "moe_runner_backend": ("moe_runner_backend",),
    "quantization": ("quantization",),
    "fp8_gemm_backend": ("fp8_gemm_backend",),
    "fp4_gemm_backend": ("fp4_gemm_backend",),
    "speculative_algorithm": ("speculative_algorithm",),
    "transfer_backend": ("transfer_backend",),
}
RUNS = ("sass", "ptx-jit")
MAX_AUDIT_BYTES = (
    16 * 1024 * 1024
)  # the real one is ~30 KB  # the audit's per-file verdicts that run on the target GPU


def _canonical(name: str) -> str:
    """PyPI's name normalisation (PEP 503): Mooncake_Transfer.Engine == mooncake-transfer-engine."""
    return re.sub(r"[-_.]+", "-", name).lower()


class KernelAuditError(ValueError):
    """The kernel audit file is missing or not an audit."""


@dataclass(frozen=True)
class KernelAudit:
    """The parts of kernel_audit.py's JSON this check reads."""

    source: str
    target_sm: int
    packages: dict[str, Any]
    jit_packages: dict[str, Any]
    toolchains: dict[str, Any]
    distributions: dict[str, str]

    def installed(self, package: str) -> bool:
        if package == "sglang" or package in self.packages:
            return True
        if _canonical(package) in {_canonical(name) for name in self.distributions}:
            return True
        return bool(self.jit_packages.get(package, {}).get("installed"))

    def version(self, package: str) -> str:
        entry = self.packages.get(package) or self.jit_packages.get(package) or {}
        return str(entry.get("version") or self.distributions.get(package) or "?")


@dataclass(frozen=True)
class KernelFinding:
    """One server choice and what the audit says about it."""

    server: str
    field: str
    choice: str
    auto: bool  # SGLang's own pick for the model on sm_120 (no flag in the topology)
    verdict: str  # runs | refused | no_kernels | not_installed | platform | unverified | unmapped
    detail: str
    source: str

    @property
    def is_problem(self) -> bool:
        return self.verdict in ("refused", "no_kernels", "not_installed", "platform")

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "field": self.field,
            "choice": self.choice,
            "auto": self.auto,
            "verdict": self.verdict,
            "detail": self.detail,
            "source": self.source,
        }


@cache
def load_kernel_map() -> dict[str, dict[str, Any]]:
    text = (resources.files("sglnode.topology") / "kernels.yaml").read_text(encoding="utf-8")
    return yaml.safe_load(text)["choices"]


def default_audit_path() -> Path:
    return Path(str(resources.files("sglnode.topology") / "kernel-audit.json"))


def load_audit(path: Path | None = None) -> KernelAudit:
    where = Path(path or default_audit_path())
    try:
        if where.stat().st_size > MAX_AUDIT_BYTES:
            raise KernelAuditError(f"{where} is larger than {MAX_AUDIT_BYTES} bytes: not a kernel audit")
        data = json.loads(where.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:  # a missing file, not UTF-8, not JSON
        raise KernelAuditError(f"cannot read the kernel audit {where}: {exc}") from exc
    sections = ("packages", "jit_packages", "toolchains", "distributions")
    if (
        not isinstance(data, dict)
        or type(data.get("target_sm")) is not int
        or not all(isinstance(data.get(name, {}), dict) for name in sections)
        or "packages" not in data
    ):
        raise KernelAuditError(f"{where} is not a kernel audit (kernel_audit.py's JSON, schema 1)")
    return KernelAudit(
        source=str(where),
        target_sm=data["target_sm"],
        packages=data["packages"],
        jit_packages=data.get("jit_packages") or {},
        toolchains=data.get("toolchains") or {},
        distributions=data.get("distributions") or {},
    )


def _choices(topology: Topology, server: Server) -> list[tuple[str, str, bool]]:
    """(field, value, auto) for every choice the server makes or SGLang makes for it."""
    found: list[tuple[str, str, bool]] = []
    fields = {
        "attention_backend": server.attention_backend,
        "quantization": topology.model.quantization,
        "speculative_algorithm": server.speculative.algorithm if server.speculative else None,
        "transfer_backend": server.transfer_backend,
    }
    for field, names in FIELD_SOURCES.items():
        values = [fields.get(field)] + [server.args.get(name) for name in names]
        for value in dict.fromkeys(str(v) for v in values if v not in (None, "")):
            found.append((field, value, False))
    chosen = {field for field, _, _ in found}
    if "attention_backend" not in chosen:
        picked = _auto_attention_backend(topology)
        if picked:
            found.append(("attention_backend", picked, True))
    if "transfer_backend" not in chosen and server.role in ("prefill", "decode"):
        default = load_catalog().defaults.get("disaggregation_transfer_backend")
        if default:
            found.append(("transfer_backend", str(default), True))
    return found


def _auto_attention_backend(topology: Topology) -> str | None:
    """What SGLang 0.5.23 picks on sm_120 for the model (recorded per preset, checked by the oracle)."""
    if not topology.model.preset:
        return None
    try:
        preset = load_model_preset(topology.model.preset)
    except PresetError:
        return None  # the validator reports an unknown preset
    return preset.sglang.attention_backend if preset.sglang else None


def _archs(entry: dict[str, Any]) -> str:
    carried = [*entry.get("sass", []), *entry.get("ptx", [])]
    return ", ".join(carried) if carried else "no device code"


def _requirement(requirement: dict[str, Any], audit: KernelAudit) -> tuple[str, str] | None:
    """None when the requirement holds; else (verdict, why)."""
    target = f"sm_{audit.target_sm}"
    if "package" in requirement:
        package = requirement["package"]
        if package not in audit.packages:
            return "not_installed", f"{package} is not in the image"
        libraries = audit.packages[package].get("libraries", [])
        version = audit.version(package)
        matched = [
            lib
            for lib in libraries
            if any(fnmatch.fnmatch(lib["path"], glob) for glob in requirement["files"])
        ]
        if not matched:
            return (
                "not_installed",
                f"{package} {version} in the image has no {', '.join(requirement['files'])}",
            )
        for lib in matched:
            if lib.get("target") not in RUNS:
                return (
                    "no_kernels",
                    f"{lib['path']} ({package} {version}) carries {_archs(lib)}: no {target} SASS or PTX",
                )
        return None
    if "jit" in requirement:
        package = requirement["jit"]
        if not audit.installed(package):
            return "not_installed", f"{package} (compiled at first use) is not in the image"
        toolchain = requirement.get("toolchain")
        if toolchain:
            tool = audit.toolchains.get(toolchain) or {}
            if not tool.get("accepts"):
                why = tool.get("error") or "absent"
                return (
                    "no_kernels",
                    f"{package} compiles with {toolchain}, which cannot build {target}a here ({why})",
                )
        return None
    if "distribution" in requirement:
        names = requirement["distribution"]
        names = [names] if isinstance(names, str) else list(names)
        if not any(audit.installed(name) for name in names):
            return "not_installed", f"{' or '.join(names)} is not installed in the image"
        return None
    raise ValueError(f"kernels.yaml: unknown requirement {requirement!r}")


def _runs_how(entry: dict[str, Any], audit: KernelAudit) -> str:
    parts = []
    for requirement in entry.get("loads", []):
        if "package" in requirement:
            parts.append(
                f"{requirement['package']} {audit.version(requirement['package'])} "
                f"(sm_{audit.target_sm} SASS)"
            )
        elif "jit" in requirement:
            tool = requirement.get("toolchain") or "its own compiler"
            parts.append(f"{requirement['jit']} JIT with {tool}")
        else:
            names = requirement["distribution"]
            parts.append(names if isinstance(names, str) else "/".join(names))
    return "; ".join(parts) or "no kernels of its own"


def judge(field: str, choice: str, audit: KernelAudit) -> tuple[str, str, str]:
    """(verdict, detail, source) for one choice of one field."""
    entry = load_kernel_map().get(field, {}).get(choice)
    if entry is None:
        return "unmapped", f"{choice} is not in kernels.yaml: the audit cannot vouch for its kernels", ""
    source = entry.get("source", "")
    if "platform" in entry:
        return "platform", f"{choice} is a backend for {entry['platform']}, not CUDA", source
    if "refused" in entry:
        refused = entry["refused"]
        detail = f'SGLang refuses it on sm_{audit.target_sm}: "{refused["message"]}" ({refused["source"]})'
        # The audit's evidence too: the refusal is not a stale check, the kernels really lack the arch.
        missing = [
            failed[1] for r in entry.get("loads", []) if (failed := _requirement(r, audit)) is not None
        ]
        return "refused", "; ".join([detail, *missing]), source
    for requirement in entry.get("loads", []):
        failed = _requirement(requirement, audit)
        if failed is not None:
            return failed[0], failed[1], source
    if "unverified" in entry:
        return "unverified", " ".join(str(entry["unverified"]).split()), source
    return "runs", _runs_how(entry, audit), source


def alternatives(field: str, audit: KernelAudit) -> list[str]:
    """Choices of a field whose kernels the audit says run here."""
    return [
        choice
        for choice, entry in load_kernel_map().get(field, {}).items()
        if choice != "auto" and not entry.get("only_for") and judge(field, choice, audit)[0] == "runs"
    ]


def check_kernels(topology: Topology, audit: KernelAudit) -> tuple[list[KernelFinding], list[Problem]]:
    findings: list[KernelFinding] = []
    problems: list[Problem] = []
    for server in topology.servers:
        for field, choice, auto in _choices(topology, server):
            verdict, detail, source = judge(field, choice, audit)
            finding = KernelFinding(server.name, field, choice, auto, verdict, detail, source)
            findings.append(finding)
            if finding.is_problem:
                picked = (
                    " (SGLang's own pick for this model: set the field to another backend)" if auto else ""
                )
                others = ", ".join(alternatives(field, audit))
                hint = f"; runs here: {others}" if others else ""
                problems.append(
                    Problem(
                        f"server {server.name}.{field}",
                        f"{choice}{picked}: {detail}{hint} (kernel audit {audit.source})",
                    )
                )
    return findings, problems


def describe(finding: KernelFinding) -> str:
    how = "SGLang's pick on sm_120" if finding.auto else "set"
    return f"{finding.server}: {finding.field} {finding.choice} ({how}): {finding.verdict}: {finding.detail}"
