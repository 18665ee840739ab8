"""Memory preflight: plan each server with SGLang's own budget rule; refuse those that cannot run.

The planner ports the pinned SGLang's arithmetic (sglnode.planning); the memory free before loading
and the weights per GPU are estimates. A server it refuses would fail at load, at KV-pool sizing
or at graph capture on the node, after minutes of weight loading. Fractions above SGLang's own
default that still fit are reported as risks, not refused.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglnode.planning.planner import plan_server, resolve_model
from sglnode.planning.presets import ModelSpec, PresetError
from sglnode.topology.model import Problem, Topology


@dataclass(frozen=True)
class MemoryVerdict:
    server: str
    fits: bool
    failure_phase: str | None
    reason: str
    plan: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "fits": self.fits,
            "failure_phase": self.failure_phase,
            "reason": self.reason,
            "plan": self.plan,
        }


def topology_model(topology: Topology) -> ModelSpec:
    """The topology's model as the planner sees it (its preset, with the topology's weight size)."""
    if not topology.model.preset:
        raise PresetError("the memory preflight needs a model preset (see sglnode plan)")
    return resolve_model(preset=topology.model.preset, weights_gb=topology.model.weights_gb)


def check_memory(topology: Topology, gpu: str | dict[str, Any]) -> tuple[list[MemoryVerdict], list[Problem]]:
    """Plan every server; a server that does not fit is a Problem naming its failure phase."""
    try:
        model = topology_model(topology)
    except PresetError as exc:
        return [], [Problem("model.preset", str(exc))]
    verdicts: list[MemoryVerdict] = []
    problems: list[Problem] = []
    for server in topology.servers:
        try:
            result = plan_server(model, server, gpu)
        except (PresetError, ValueError, ArithmeticError) as exc:
            problems.append(Problem(f"server {server.name}", f"memory preflight cannot plan it: {exc}"))
            continue
        verdicts.append(
            MemoryVerdict(server.name, result.fits, result.failure_phase, result.reason, result.to_json())
        )
        if not result.fits:
            problems.append(
                Problem(
                    f"server {server.name}.mem_fraction_static",
                    f"does not fit in memory ({result.failure_phase}): {result.reason}",
                )
            )
    return verdicts, problems
