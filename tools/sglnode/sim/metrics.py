"""Prometheus text for /metrics, with SGLang's metric names and labels (all values simulated).

Names and label keys follow the pinned SGLang's python/sglang/srt/observability/metrics_collector.py
(SchedulerMetricsCollector: sglang:num_running_reqs, sglang:num_used_tokens, sglang:token_usage,
sglang:gen_throughput, sglang:num_queue_reqs, sglang:cache_hit_rate, sglang:max_total_num_tokens;
TokenizerMetricsCollector: sglang:prompt_tokens_total, sglang:generation_tokens_total,
sglang:num_requests_total, sglang:time_to_first_token_seconds, sglang:inter_token_latency_seconds,
sglang:e2e_request_latency_seconds). `sglnode_simulated 1` marks the source as the test double.
"""

from __future__ import annotations

from sglnode.sim.engine import Histogram, SimEngine


def _labels(engine: SimEngine) -> str:
    mode = engine.config.disaggregation_mode
    engine_type = mode if mode in ("prefill", "decode") else "unified"
    name = engine.config.served_model_name.replace("\\", "\\\\").replace('"', '\\"')
    return f'model_name="{name}",engine_type="{engine_type}",tp_rank="0",pp_rank="0"'


def _gauge(lines: list[str], name: str, help_text: str, labels: str, value: float) -> None:
    lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name}{{{labels}}} {value}"]


def _counter(lines: list[str], name: str, help_text: str, labels: str, value: float) -> None:
    lines += [f"# HELP {name} {help_text}", f"# TYPE {name} counter", f"{name}{{{labels}}} {value}"]


def _histogram(lines: list[str], name: str, help_text: str, labels: str, hist: Histogram) -> None:
    lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
    for bound, count in zip(hist.buckets, hist.counts, strict=True):
        lines.append(f'{name}_bucket{{{labels},le="{bound}"}} {count}')
    lines.append(f'{name}_bucket{{{labels},le="+Inf"}} {hist.count}')
    lines.append(f"{name}_sum{{{labels}}} {hist.total}")
    lines.append(f"{name}_count{{{labels}}} {hist.count}")


def render_metrics(engine: SimEngine) -> str:
    labels = _labels(engine)
    lines: list[str] = [
        "# HELP sglnode_simulated 1 when these metrics come from sglnode sim (a test double of SGLang).",
        "# TYPE sglnode_simulated gauge",
        "sglnode_simulated 1",
    ]
    _gauge(lines, "sglang:num_running_reqs", "The number of running requests.", labels, engine.running)
    _gauge(lines, "sglang:num_used_tokens", "The number of used tokens.", labels, engine.used_tokens)
    _gauge(lines, "sglang:token_usage", "The token usage.", labels, round(engine.token_usage(), 6))
    _gauge(
        lines,
        "sglang:gen_throughput",
        "The generation throughput (token/s).",
        labels,
        engine.gen_throughput(),
    )
    _gauge(
        lines, "sglang:num_queue_reqs", "The number of requests in the waiting queue.", labels, engine.queued
    )
    _gauge(lines, "sglang:cache_hit_rate", "The prefix cache hit rate.", labels, 0.0)
    _gauge(
        lines,
        "sglang:max_total_num_tokens",
        "Maximum total tokens in the KV pool.",
        labels,
        engine.plan.kv_tokens,
    )
    _counter(
        lines,
        "sglang:prompt_tokens_total",
        "Number of prefill tokens processed.",
        labels,
        engine.prompt_tokens_total,
    )
    _counter(
        lines,
        "sglang:generation_tokens_total",
        "Number of generation tokens processed.",
        labels,
        engine.generation_tokens_total,
    )
    _counter(
        lines, "sglang:num_requests_total", "Number of requests processed.", labels, engine.requests_total
    )
    _histogram(
        lines,
        "sglang:time_to_first_token_seconds",
        "Histogram of time to first token in seconds.",
        labels,
        engine.ttft,
    )
    _histogram(
        lines,
        "sglang:inter_token_latency_seconds",
        "Histogram of inter-token latency in seconds.",
        labels,
        engine.itl,
    )
    _histogram(
        lines,
        "sglang:e2e_request_latency_seconds",
        "Histogram of End-to-end request latency in seconds",
        labels,
        engine.e2e,
    )
    return "\n".join(lines) + "\n"
