"""The tuning campaign as code: a sweep over serving configurations on the node, resumable and bounded.

spec.py reads a sweep spec (strict: unknown keys are refused), candidates.py expands its axes into
candidate topologies and drops those the validator, the kernel audit or the planner refuse, nccl.py
orders NCCL variants by this node's all-reduce measurements, deploy.py brings one candidate up and
down with docker compose, sweep.py runs the campaign (state file, budgets, signals), results.py picks
the winner under an SLO and writes the table, JSON, plot and winning topology, and moe.py reports
which fused-MoE Triton configs SGLang ships for this GPU. inimage/ holds the scripts that run inside
the SGLang image (all-reduce sweep, MoE config probe, MoE tuning).
"""
