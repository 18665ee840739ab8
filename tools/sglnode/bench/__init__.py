"""`sglnode bench`: load generation, a lean streaming client, metrics and reports.

Metric definitions live in docs/bench.md; the code that computes each one names its section there.
"""
