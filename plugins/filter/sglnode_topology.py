"""Ansible filters over the sglnode topology package: the playbook validates and renders with the
same Python as `sglnode topology check|render`, so a rollout writes byte for byte what the CLI shows.

    {{ topology | sglnode_topology_check(node_gpus=8, gpu='rtx-pro-6000-blackwell', kernel_audit='') }}
        -> {"valid": bool, "name": str, "problems": [str], "memory": [{server, fits, ...}],
            "kernels": [{server, field, choice, verdict, ...}]}
    {{ topology | sglnode_topology_render(runtime='real', bind_address='10.0.0.1', ...) }}
        -> [{"path", "content", "mode", "kind"}]   (raises on an invalid topology)
    {{ lookup('ansible.builtin.file', path) | sglnode_topology_load }}
        -> the topology mapping, read by sglnode's bounded safe loader (1 MiB, few YAML aliases),
           the same one `sglnode topology check` uses (from_yaml would expand an alias bomb)

Needs the sglnode package on the controller (the repo's .venv installs it editable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleFilterError

try:
    from sglnode.topology import RenderOptions, check_topology, render
    from sglnode.topology.kernels import KernelAuditError, check_kernels, load_audit
    from sglnode.topology.memory import check_memory
    from sglnode.topology.model import DEFAULT_NODE_GPUS
    from sglnode.topology.safeyaml import MAX_TOPOLOGY_BYTES, InputFileError, parse_yaml

    IMPORT_ERROR: str | None = None
except ImportError as exc:  # pragma: no cover - reported when a filter is used
    IMPORT_ERROR = str(exc)
    DEFAULT_NODE_GPUS = 8
    MAX_TOPOLOGY_BYTES = 1 << 20


def _require_sglnode() -> None:
    if IMPORT_ERROR:
        raise AnsibleFilterError(
            f"the sglnode package is not importable on the controller ({IMPORT_ERROR}); "
            "run Ansible from the repo's .venv (make venv)"
        )


def _mapping(topology: Any) -> dict[str, Any]:
    if not isinstance(topology, dict):
        raise AnsibleFilterError(f"a topology must be a mapping, got {type(topology).__name__}")
    # Ansible hands over its own string/dict subclasses; plain types keep the validator's checks exact.
    return _plain(topology)


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    # Exact builtin types: Ansible 2.19 hands over tagged subclasses that YAML dumping refuses.
    if isinstance(value, str):
        return value.encode("utf-8").decode("utf-8")
    if isinstance(value, bool):
        return value is True
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return value


def sglnode_topology_check(
    topology: Any,
    *,
    node_gpus: int = DEFAULT_NODE_GPUS,
    gpu: str = "rtx-pro-6000-blackwell",
    memory: bool = True,
    kernels: bool = True,
    kernel_audit: str = "",
) -> dict[str, Any]:
    """kernel_audit: the image's kernel-audit.json on the controller ("" = the shipped copy)."""
    _require_sglnode()
    model, problems = check_topology(_mapping(topology), node_gpus=int(node_gpus))
    verdicts = []
    findings = []
    if not problems and memory:
        verdicts, memory_problems = check_memory(model, gpu)
        problems.extend(memory_problems)
    if not problems and kernels:
        try:
            audit = load_audit(Path(kernel_audit) if kernel_audit else None)
        except KernelAuditError as exc:
            raise AnsibleFilterError(str(exc)) from exc
        findings, kernel_problems = check_kernels(model, audit)
        problems.extend(kernel_problems)
    return {
        "valid": not problems,
        "name": model.name,
        "problems": [str(p) for p in problems],
        "memory": [v.to_json() for v in verdicts],
        "kernels": [f.to_json() for f in findings],
    }


def sglnode_topology_render(
    topology: Any, node_gpus: int = DEFAULT_NODE_GPUS, **options: Any
) -> list[dict[str, str]]:
    _require_sglnode()
    model, problems = check_topology(_mapping(topology), node_gpus=int(node_gpus))
    if problems:
        raise AnsibleFilterError("invalid topology:\n" + "\n".join(f"  - {p}" for p in problems))
    options = _plain(options)
    if not options.get("node"):
        options.pop("node", None)
    try:
        render_options = RenderOptions(**options)
    except (TypeError, ValueError) as exc:
        raise AnsibleFilterError(f"sglnode_topology_render: {exc}") from exc
    return [f.to_json() for f in render(model, render_options)]


def sglnode_topology_load(text: Any, name: str = "topology") -> dict[str, Any]:
    """A topology file's text as a mapping, through sglnode's bounded safe YAML loader."""
    _require_sglnode()
    plain = _plain(text)
    if not isinstance(plain, str):
        raise AnsibleFilterError(
            f"sglnode_topology_load: expected the file's text, got {type(text).__name__}"
        )
    if len(plain.encode("utf-8")) > MAX_TOPOLOGY_BYTES:
        raise AnsibleFilterError(f"{name} is more than the {MAX_TOPOLOGY_BYTES} bytes a topology may be")
    try:
        data = parse_yaml(plain, where=name)
    except InputFileError as exc:
        raise AnsibleFilterError(str(exc)) from exc
    if not isinstance(data, dict):
        raise AnsibleFilterError(f"{name} is not a YAML mapping")
    return data


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {
            "sglnode_topology_load": sglnode_topology_load,
            "sglnode_topology_check": sglnode_topology_check,
            "sglnode_topology_render": sglnode_topology_render,
        }
