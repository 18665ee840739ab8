"""Topology model, validator and renderer: one source of truth for what runs on which GPUs.

model.py normalizes a topology file, check.py lists every problem, memory.py asks the planner
whether each server fits, render.py produces every file the nccl_env and sglang_serve roles write.
"""

from sglnode.topology.check import check_topology
from sglnode.topology.model import Problem, Topology, TopologyFileError, load_topology, read_topology_file
from sglnode.topology.render import RenderedFile, RenderOptions, render

__all__ = [
    "Problem",
    "RenderOptions",
    "RenderedFile",
    "Topology",
    "TopologyFileError",
    "check_topology",
    "load_topology",
    "read_topology_file",
    "render",
]
