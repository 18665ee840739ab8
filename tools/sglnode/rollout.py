"""The rollout check behind `sglnode validate`: every server ready, one generation through the router,
then a bounded benchmark against targets, with a report a person reads and a JSON a machine reads.

It composes the libraries behind the other commands, in this process: the readiness waiter per server
(following the compose service's log, so a crash is diagnosed within a second), a PD generation or a
plain wait through the router, the planner's roofline for the decode side, and a bench session (whose
workers are the only child processes: they isolate the load generator's event loops).
"""

from __future__ import annotations

import io
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sglnode.bench.checks import THRESHOLD_FLAGS, Targets, threshold_from_data
from sglnode.bench.session import BenchConfig, BenchConfigError, plot_available, run_session
from sglnode.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sglnode.interrupts import Interrupted, signal_exit_code
from sglnode.pins import PINS
from sglnode.planning.planner import plan_server
from sglnode.readiness.logwatch import compose_follower
from sglnode.readiness.waiter import WaitOptions
from sglnode.readiness.waiter import wait_for_server as wait_until_ready
from sglnode.topology.memory import topology_model
from sglnode.topology.model import Server, Topology

# Roles whose servers produce output tokens (their roofline bounds the router's throughput).
DECODING_ROLES = ("decode", "regular")
# SGLang prefixes its log lines with "[YYYY-mm-dd HH:MM:SS ...]" (python/sglang/srt/utils: configure_logger).
LOG_TIMESTAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
SIMULATED_NOTE = (
    "SIMULATED: the servers are `sglnode sim`, a test double of SGLang. Every figure below describes "
    "the simulator on this machine, not SGLang and not the GPU node."
)


@dataclass(frozen=True)
class BenchSettings:
    api: str = "chat"
    concurrency: str = "1,4,16"
    num_requests: int = 48
    duration_s: float = 60.0
    input_len: int = 256
    output_len: int = 128
    # min_output_tok_s / max_ttft_p99_ms / max_itl_p99_ms: a number for every stage, or a mapping of
    # concurrency to number (bench.checks); max_error_rate: a fraction.
    targets: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class RolloutSettings:
    compose_dir: Path
    report_dir: Path
    bind_address: str = "127.0.0.1"
    node: str | None = None
    gpu: str = PINS.gpu.preset
    timeout_s: float = 1800.0
    api_key: str | None = None
    bench: BenchSettings = field(default_factory=BenchSettings)
    # Set on SIGINT/SIGTERM: every wait still running ends (and its log follower with it).
    cancel: threading.Event = field(default_factory=threading.Event)


def targets_from_settings(targets: dict[str, object]) -> Targets:
    """The role's / validate's targets as bench.checks.Targets; ValueError names a bad one."""
    unknown = set(targets) - {*THRESHOLD_FLAGS, "max_error_rate"}
    if unknown:
        raise ValueError(f"unknown target(s): {', '.join(sorted(unknown))}")
    values: dict[str, object] = {
        name: threshold_from_data(targets[name], name)
        for name in THRESHOLD_FLAGS
        if targets.get(name) is not None
    }
    if targets.get("max_error_rate") is not None:
        rate = targets["max_error_rate"]
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not 0 <= rate <= 1:
            raise ValueError(f"max_error_rate: a fraction between 0 and 1 (got {rate!r})")
        values["max_error_rate"] = float(rate)
    return Targets(**values)  # type: ignore[arg-type]


def servers_on_node(topology: Topology, node: str) -> list[Server]:
    return [server for server in topology.servers if node in server.nodes]


def wait_for_one_server(server: Server, settings: RolloutSettings) -> dict[str, Any]:
    compose = settings.compose_dir / "compose.yaml"
    url = f"http://{settings.bind_address}:{server.port}"
    options = WaitOptions(
        url=url,
        follower=compose_follower(compose, server.name),
        timeout_s=settings.timeout_s,
        cancel=settings.cancel,
    )
    result = wait_until_ready(options)
    return {"server": server.name, "url": url, "exit_code": result.exit_code, "result": result.to_json()}


def wait_for_router(topology: Topology, settings: RolloutSettings) -> dict[str, Any]:
    url = f"http://{settings.bind_address}:{topology.router.port}"
    is_pd = any(server.role == "prefill" for server in topology.servers)
    # /health can stay 200 while KV transfer fails: with PD, readiness is one real generation.
    result = wait_until_ready(
        WaitOptions(url=url, follower=None, timeout_s=settings.timeout_s, pd=is_pd, cancel=settings.cancel)
    )
    return {
        "server": "router",
        "url": url,
        "exit_code": result.exit_code,
        "result": result.to_json(),
        "pd": is_pd,
        # Wall-clock time the router answered ready (epoch seconds): where a switch's downtime ends
        # (`sglnode state finish --down-since`).
        "ready_at": round(time.time(), 3) if result.exit_code == EXIT_OK else None,
    }


def aggregate_plan(topology: Topology, gpu: str, concurrencies: list[int]) -> dict[str, Any] | None:
    """The decode side's plan at the bench's own concurrencies (interpolating a concave roofline
    between far-apart points would understate it). N identical decoding servers behind the router
    share the load: at concurrency C each runs C/N requests, and together they make N times that."""
    decoding = [s for s in topology.servers if s.role in DECODING_ROLES]
    if not decoding or not topology.model.preset:
        return None
    replicas = len(decoding)
    per_replica = sorted({max(1, round(c / replicas)) for c in concurrencies})
    try:
        result = plan_server(topology_model(topology), decoding[0], gpu, concurrency=per_replica)
    except ValueError:
        return None
    plan = result.to_json()
    plan["replicas_behind_router"] = replicas
    plan["roofline"] = [
        {
            **point,
            "concurrency": point["concurrency"] * replicas,
            "decode_tok_s": point["decode_tok_s"] * replicas,
        }
        for point in plan["roofline"]
    ]
    return plan


def run_bench(topology: Topology, settings: RolloutSettings, plan_path: Path | None) -> dict[str, Any]:
    bench = settings.bench
    out = settings.report_dir
    targets = targets_from_settings(bench.targets)
    config = BenchConfig(
        url=f"http://{settings.bind_address}:{topology.router.port}",
        api=bench.api,
        model=topology.model.served_name or topology.model.path,
        api_key=settings.api_key,
        concurrency=bench.concurrency,
        num_requests=bench.num_requests,
        duration_s=bench.duration_s,
        input_len=bench.input_len,
        output_len=bench.output_len,
        progress=False,
        json_path=out / "bench.json",
        plot_path=out / "bench.png" if plot_available() else None,
        plan_path=plan_path,
        targets=targets,
    )
    table = io.StringIO()
    started = time.monotonic()
    try:
        code, report = run_session(config, stdout=table)
    except BenchConfigError as exc:
        return {
            "exit_code": EXIT_USAGE,
            "elapsed_s": 0.0,
            "table": f"bench not run: {exc}\n",
            "report": None,
            "plot": None,
        }
    return {
        "exit_code": code,
        "elapsed_s": round(time.monotonic() - started, 1),
        "table": table.getvalue(),
        "report": report,
        "plot": str(out / "bench.png") if (out / "bench.png").exists() else None,
    }


def _bench_saw_simulator(bench: dict[str, Any] | None) -> bool:
    return bool(bench and bench.get("report") and bench["report"]["target"].get("simulated"))


def run_rollout_check(
    topology: Topology, settings: RolloutSettings, simulated_runtime: bool
) -> dict[str, Any]:
    settings.report_dir.mkdir(parents=True, exist_ok=True)
    node = settings.node or topology.nodes[0].name
    servers = servers_on_node(topology, node)
    # All at once: the servers start together, and each watcher diagnoses its own crash at once.
    pool = ThreadPoolExecutor(max_workers=max(len(servers), 1))
    try:
        waits = list(pool.map(lambda server: wait_for_one_server(server, settings), servers))
    except Interrupted as signal_:  # end every wait (and its `docker compose logs -f`), then report
        settings.cancel.set()
        pool.shutdown(wait=True)
        outcome: dict[str, Any] = {
            "topology": topology.name,
            "node": node,
            "waits": [],
            "bench": None,
            "plan": None,
            "interrupted": signal_.name,
            "exit_code": signal_exit_code(signal_.name),
            "simulated": simulated_runtime,
        }
        _write_reports(settings, outcome)
        return outcome
    pool.shutdown(wait=True)
    outcome = {"topology": topology.name, "node": node, "waits": waits, "bench": None, "plan": None}
    failed = [w for w in waits if w["exit_code"] != EXIT_OK]
    if not failed and topology.router.node == node:
        router = wait_for_router(topology, settings)
        waits.append(router)
        failed = [router] if router["exit_code"] != EXIT_OK else []
    if failed:
        outcome["exit_code"] = failed[0]["exit_code"]
    else:
        concurrencies = [int(c) for c in settings.bench.concurrency.split(",") if c.strip()]
        plan = aggregate_plan(topology, settings.gpu, concurrencies)
        plan_path = None
        if plan:
            plan_path = settings.report_dir / "plan.json"
            plan_path.write_text(json.dumps(plan, indent=2) + "\n")
        outcome["plan"] = plan
        outcome["bench"] = run_bench(topology, settings, plan_path)
        # A crashed or unready server keeps `sglnode wait`'s own exit code (2, 3, 4) above; an
        # interrupted bench its 130/143, a refused configuration 64.
        bench_code = outcome["bench"]["exit_code"]
        outcome["exit_code"] = (
            bench_code
            if bench_code in (EXIT_USAGE, 130, 143)
            else (EXIT_OK if bench_code == 0 else EXIT_FAILED)
        )
    outcome["simulated"] = simulated_runtime or _bench_saw_simulator(outcome["bench"])
    _write_reports(settings, outcome)
    return outcome


def _write_reports(settings: RolloutSettings, outcome: dict[str, Any]) -> None:
    (settings.report_dir / "report.json").write_text(json.dumps(outcome, indent=2, default=str) + "\n")
    (settings.report_dir / "report.md").write_text(render_report(outcome))


def _log_time(text: str) -> datetime | None:
    match = LOG_TIMESTAMP.match(text)
    return datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S") if match else None


def startup_timeline(milestones: list[dict[str, Any]]) -> list[tuple[str, float]]:
    """First time each startup stage was seen, in seconds since the first milestone.

    The log's own timestamps are used when present, so a wait that started after the server
    (and replayed its log) still shows how long each stage really took.
    """
    first_seen: dict[str, dict[str, Any]] = {}
    for milestone in milestones:
        first_seen.setdefault(milestone["stage"], milestone)
    stamps = [_log_time(m["text"]) for m in first_seen.values()]
    if all(stamps) and stamps:
        start = stamps[0]
        return [
            (stage, (stamp - start).total_seconds()) for stage, stamp in zip(first_seen, stamps, strict=True)
        ]
    start_s = next(iter(first_seen.values()))["elapsed_s"] if first_seen else 0.0
    return [(stage, m["elapsed_s"] - start_s) for stage, m in first_seen.items()]


def _timeline(wait: dict[str, Any]) -> str:
    result = wait.get("result") or {}
    steps = [f"{stage} +{seconds:.0f}s" for stage, seconds in startup_timeline(result.get("milestones", []))]
    verdict = result.get("outcome", f"exit {wait['exit_code']}")
    return f"- {wait['server']} ({wait['url']}): {verdict}, waited {result.get('elapsed_s', '?')} s" + (
        f"; startup: {', '.join(steps)}" if steps else ""
    )


def _diagnosis(wait: dict[str, Any]) -> list[str]:
    diagnosis = (wait.get("result") or {}).get("diagnosis")
    if not diagnosis:
        return ["  no diagnosis (nothing in the log named a cause)"] if wait["exit_code"] else []
    lines = [
        f"  cause: {diagnosis['cause']}"
        + (f" (phase {diagnosis['phase']})" if diagnosis.get("phase") else "")
    ]
    lines += [f"  evidence line {e['line_no']}: {e['text']}" for e in diagnosis.get("evidence", [])[:6]]
    lines.append(f"  fix: {diagnosis['fix']}")
    return lines


def render_report(outcome: dict[str, Any]) -> str:
    lines = [f"# Rollout check: topology {outcome['topology']} on node {outcome['node']}", ""]
    if outcome["simulated"]:
        lines += [f"**{SIMULATED_NOTE}**", ""]
    lines += ["## Readiness", ""]
    for wait in outcome["waits"]:
        lines.append(_timeline(wait))
        lines += _diagnosis(wait)
    bench = outcome.get("bench")
    if bench:
        lines += [
            "",
            "## Throughput and latency (sglnode bench through the router)",
            "",
            "```",
            bench["table"].rstrip(),
        ]
        lines += ["```", ""]
        if bench.get("plot"):
            lines.append(f"Plot: {bench['plot']}")
        if outcome.get("plan"):
            lines.append(
                "Roofline from `sglnode plan` (an estimate, not a measurement) for "
                f"{outcome['plan'].get('replicas_behind_router', 1)} decoding server(s)."
            )
    if outcome.get("interrupted"):
        lines += ["", f"Interrupted by {outcome['interrupted']} before the check finished."]
    lines += ["", f"Result: exit {outcome['exit_code']}", ""]
    return "\n".join(lines)
