"""`sglnode sim`: a TEST DOUBLE of the pinned SGLang server. It runs no model and needs no GPU.

It accepts SGLang's launch flags, prints SGLang's startup lines (memory figures from
`sglnode.planning.planner`), speaks SGLang's HTTP API with paced, meaningless tokens, and fails the way
SGLang fails when a config does not fit or a fault is injected. Every number it produces is
simulated; it says so in its banner, its JSON (`"simulated": true`) and its metrics
(`sglnode_simulated 1`).
"""
