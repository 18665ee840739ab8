"""sglnode: validate an SGLang rollout on an 8-GPU Blackwell node.

One CLI (`sglnode`), one module per job: topology model, log watcher, diagnosis rules,
memory planner, benchmark, and a simulator that is a test double of the SGLang server.
"""

__version__ = "0.1.0"
