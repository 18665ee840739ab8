"""Memory preflight: ask the planner whether each server's plan fits its GPUs; refuse those that do not.

The planner is a model of SGLang's memory budget (sglnode.planner), not a measurement; a server it
refuses would fail at load or KV-pool allocation on the node, after minutes of weight loading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglnode.planner import ServerSpec, plan_server
from sglnode.presets import PresetError
from sglnode.topology.model import Problem, Server, Topology

# What SGLang picks when --mem-fraction-static is not given is model- and GPU-dependent; the
# planner's own default stands in for it (planner.ServerSpec.mem_fraction_static).
PLANNER_DEFAULT_MEM_FRACTION = ServerSpec.mem_fraction_static


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


def planner_server(server: Server) -> dict[str, Any]:
    """The planner's view of a server entry (keys of planner.resolve_server)."""
    entry: dict[str, Any] = {
        "tp": server.tp,
        "dp": server.dp,
        "ep": server.ep or 1,
        "mem_fraction_static": server.mem_fraction_static or PLANNER_DEFAULT_MEM_FRACTION,
        "kv_cache_dtype": server.kv_cache_dtype or "auto",
        "context_length": server.context_length,
        "chunked_prefill_size": server.chunked_prefill_size,
        "cuda_graph_max_bs_decode": server.cuda_graph_max_bs_decode,
    }
    if server.speculative and server.speculative.algorithm:
        entry["speculative"] = {"algorithm": server.speculative.algorithm}
    return entry


def check_memory(topology: Topology, gpu: str | dict[str, Any]) -> tuple[list[MemoryVerdict], list[Problem]]:
    """Plan every server; a server that does not fit is a Problem naming its failure phase."""
    model = {"preset": topology.model.preset, "weights_gb": topology.model.weights_gb}
    if not topology.model.preset:
        return [], [Problem("model.preset", "the memory preflight needs a model preset (see sglnode plan)")]
    verdicts: list[MemoryVerdict] = []
    problems: list[Problem] = []
    for server in topology.servers:
        try:
            result = plan_server(model, planner_server(server), gpu)
        except (PresetError, ValueError) as exc:
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
