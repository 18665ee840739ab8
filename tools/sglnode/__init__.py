"""sglnode: validate an SGLang rollout on an 8-GPU Blackwell node.

One CLI (`sglnode`), one module per job: topology model, log watcher, diagnosis rules,
memory planner, benchmark, and a simulator that is a test double of the SGLang server.
"""

from sglnode.pins import PINS

# The package's version is pinned with everything else (tools/sglnode/pins.yaml); pyproject.toml
# repeats it for the wheel's metadata, and tools/tests/test_pins.py checks that the two agree.
__version__ = PINS.sglnode
