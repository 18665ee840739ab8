"""One benchmark run as a library call: `sglnode bench` and the rollout check both run this.

A session checks its whole configuration before sending anything (numbers, URL, output paths,
plot support, what the machine can hold), probes the target (the simulator says so), warms up,
flushes the prefix cache before each stage, runs each stage, writes the JSON report after every
stage (partial results survive a crash or a kill), evaluates the targets, prints the table, and
only then tries the plot. SIGINT/SIGTERM end the run where it is: every worker is stopped, the
report is written with `"complete": false, "interrupted": "SIGINT"|"SIGTERM"`, exit 130/143.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import resource
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from sglnode.bench.apis import API_NAMES, BodyOptions
from sglnode.bench.checks import Targets, evaluate, unchecked
from sglnode.bench.encode import RequestEncoder
from sglnode.bench.loadgen import Target
from sglnode.bench.metrics import Slo, summarize
from sglnode.bench.prompts import WORKLOADS, PromptSpec
from sglnode.bench.report import SCHEMA, ProgressBar, print_report, write_json
from sglnode.bench.runner import StageRun, StageSpec, run_stage
from sglnode.bench.target import Endpoint, flush_cache, parse_url, probe_simulated
from sglnode.interrupts import Interrupted, raise_on_signals, signal_exit_code
from sglnode.pins import PINS

EXIT_OK = 0
EXIT_TARGET_MISSED = 1

# What one process may hold (issue 16: `--concurrency 100000000` took 5.8 GB before anything was
# sent). Each connection is a file descriptor; keep some for the rest of the process.
FD_RESERVE = 64
# Memory per request kept until its stage is summarised: the record, plus one float per output
# token gap (a Python float in a list: 24 + 8 bytes); per open connection: protocol, transport
# buffers and the request being sent (~8 bytes per prompt token id as JSON text).
RECORD_BYTES = 1024
GAP_BYTES = 32
CONNECTION_BYTES = 64 * 1024
PROMPT_BYTES_PER_TOKEN = 8
# Share of the machine's available memory one run may plan to use.
MEMORY_SHARE = 0.5
# Upper bounds that hold on any machine (the argument parser enforces the same ones).
MAX_TOKENS = 1 << 20  # per prompt or output: the longest context of the models we serve
MAX_WORKERS = 256
MAX_NUM_REQUESTS = 10_000_000


class BenchConfigError(ValueError):
    """A configuration no run can start from (reported as a usage error, before anything is sent)."""


@dataclass(frozen=True)
class BenchConfig:
    url: str = f"http://127.0.0.1:{PINS.ports.sglang}"
    api: str = "generate"
    model: str = "default"
    api_key: str | None = None
    concurrency: str | None = None  # comma list; default "1"
    request_rate: str | None = None  # comma list of request rates (req/s), instead of concurrency
    burstiness: float = 1.0  # with request_rate: gamma shape of the gaps (1 = Poisson)
    num_requests: int = 200
    duration_s: float = 120.0
    input_len: int = 128
    output_len: int = 256
    workload: str = "random-ids"
    prefix_len: int = 0
    prefix_groups: int = 1
    ignore_eos: bool = True
    continuous_usage: bool = True
    warmup: int = 4
    seed: int = 0
    workers: int = 1
    request_timeout_s: float = 600.0
    stall_timeout_s: float = 60.0
    connect_timeout_s: float = 10.0
    flush_cache: bool = True
    json_path: Path | None = None
    plot_path: Path | None = None
    plan_path: Path | None = None
    progress: bool | None = None  # None: when stderr is a terminal
    targets: Targets = field(default_factory=Targets)
    slo_ttft_ms: float | None = None
    slo_tpot_ms: float | None = None


@dataclass
class Prepared:
    """Everything checked before the first byte is sent."""

    endpoint: Endpoint
    specs: list[StageSpec]
    roofline: list[tuple[float, float]] | None
    prompts: PromptSpec
    notes: list[str] = field(default_factory=list)


def _numbers(text: str, kind: type[int] | type[float], flag: str) -> list[float]:
    try:
        values = [kind(v) for v in text.split(",") if v.strip()]
    except ValueError as exc:
        raise BenchConfigError(f"{flag}: {exc}") from exc
    if not values or any(not math.isfinite(v) or v <= 0 for v in values):
        raise BenchConfigError(f"{flag}: give positive numbers, comma-separated (got {text!r})")
    return values


def load_plan(path: Path) -> list[tuple[float, float]]:
    try:
        data = json.loads(path.read_text())
        points = [(float(p["concurrency"]), float(p["decode_tok_s"])) for p in data["roofline"]]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        raise BenchConfigError(
            f"--plan {path}: not a `sglnode plan --json` file with a roofline ({exc})"
        ) from exc
    if not points:
        raise BenchConfigError(f"--plan {path}: the roofline list is empty")
    return points


def stages(config: BenchConfig, notes: list[str] | None = None) -> list[StageSpec]:
    """The stages, each with the run-wide number of its first request (after the warm-up's)."""
    notes = notes if notes is not None else []
    base = config.warmup
    specs = []
    if config.request_rate:
        for rate in _numbers(config.request_rate, float, "--request-rate"):
            specs.append(
                StageSpec(
                    f"rate={rate:g}/s",
                    None,
                    rate,
                    config.num_requests,
                    config.duration_s,
                    base,
                    config.burstiness,
                )
            )
            base += config.num_requests
        return specs
    for level in _numbers(config.concurrency or "1", int, "--concurrency"):
        concurrency = int(level)
        if concurrency > config.num_requests:
            # More slots than requests would only be idle connections (and memory).
            notes.append(
                f"concurrency {concurrency} clamped to {config.num_requests} (--num-requests): "
                "no more requests than that can be in flight"
            )
            concurrency = config.num_requests
        specs.append(
            StageSpec(f"c={concurrency}", concurrency, None, config.num_requests, config.duration_s, base)
        )
        base += config.num_requests
    return specs


def _finite(value: float, flag: str, positive: bool = True) -> None:
    if not math.isfinite(value) or (value <= 0 if positive else value < 0):
        raise BenchConfigError(
            f"--{flag} must be a finite number {'> 0' if positive else '>= 0'} (got {value})"
        )


def check_config(config: BenchConfig) -> None:
    if config.api not in API_NAMES:
        raise BenchConfigError(f"--api must be one of {', '.join(API_NAMES)}")
    for flag, top in (
        ("num_requests", MAX_NUM_REQUESTS),
        ("input_len", MAX_TOKENS),
        ("output_len", MAX_TOKENS),
        ("workers", MAX_WORKERS),
    ):
        value = getattr(config, flag)
        if not 1 <= value <= top:
            raise BenchConfigError(f"--{flag.replace('_', '-')} must be between 1 and {top:,} (got {value})")
    for flag, value in (
        ("duration", config.duration_s),
        ("request-timeout", config.request_timeout_s),
        ("stall-timeout", config.stall_timeout_s),
        ("connect-timeout", config.connect_timeout_s),
        ("burstiness", config.burstiness),
    ):
        _finite(value, flag)
    if not 0 <= config.warmup <= MAX_NUM_REQUESTS:
        raise BenchConfigError(f"--warmup must be between 0 and {MAX_NUM_REQUESTS:,}")
    if not 0.0 <= config.targets.max_error_rate <= 1.0:
        raise BenchConfigError("--max-error-rate is a fraction between 0 and 1")
    for flag, slo in (("slo-ttft-ms", config.slo_ttft_ms), ("slo-tpot-ms", config.slo_tpot_ms)):
        if slo is not None:
            _finite(slo, flag)
    if config.workload not in WORKLOADS:
        raise BenchConfigError(f"--workload must be one of {', '.join(WORKLOADS)}")
    if config.workload == "shared-prefix":
        if not 0 < config.prefix_len < config.input_len:
            raise BenchConfigError("--workload shared-prefix needs 0 < --prefix-len < --input-len")
        if config.prefix_groups < 1:
            raise BenchConfigError("--prefix-groups must be >= 1")
    elif config.prefix_len:
        raise BenchConfigError("--prefix-len only applies to --workload shared-prefix")
    if config.burstiness != 1.0 and not config.request_rate:
        raise BenchConfigError("--burstiness shapes request-rate arrivals; it needs --request-rate")


def check_output_path(path: Path, flag: str) -> None:
    """A report path that can be written, checked before the run (a long run must not end in a
    traceback that loses its results)."""
    if path.is_dir():
        raise BenchConfigError(f"{flag} {path} is a directory; give a file name")
    parent = path.parent if str(path.parent) else Path(".")
    if parent.exists() and not parent.is_dir():
        raise BenchConfigError(f"{flag} {path}: {parent} is not a directory")
    if not parent.is_dir():
        raise BenchConfigError(f"{flag} {path}: the directory {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise BenchConfigError(f"{flag} {path}: not writable by this user")


def plot_available() -> bool:
    try:
        return importlib.util.find_spec("matplotlib") is not None
    except (ImportError, ValueError):  # ValueError: blocked in sys.modules (sys.modules[name] = None)
        return False


def _fd_budget() -> int:
    """File descriptors this process may open, after raising the soft limit to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or hard > soft:
        target = hard if hard != resource.RLIM_INFINITY else max(soft, 1 << 20)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError):
            pass
    return soft - FD_RESERVE


def _available_memory() -> int | None:
    try:
        with open("/proc/meminfo") as meminfo:
            for line in meminfo:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def check_capacity(config: BenchConfig, specs: list[StageSpec]) -> None:
    """Refuse a run this machine cannot hold, with the numbers, before it starts."""
    slots = max((s.concurrency or 0) for s in specs) if specs else 0
    per_worker = math.ceil(slots / config.workers)
    budget = _fd_budget()
    if per_worker > budget:
        raise BenchConfigError(
            f"--concurrency {slots} needs {per_worker:,} connections per client process; this process "
            f"may open {budget + FD_RESERVE:,} files (ulimit -n): add --workers or raise ulimit -n"
        )
    in_flight = max(slots, 1) if not config.request_rate else min(config.num_requests, 4096)
    need = config.num_requests * (RECORD_BYTES + GAP_BYTES * config.output_len) + in_flight * (
        CONNECTION_BYTES + PROMPT_BYTES_PER_TOKEN * config.input_len
    )
    available = _available_memory()
    if available is not None and need > MEMORY_SHARE * available:
        raise BenchConfigError(
            f"this run would hold about {need / 2**30:,.1f} GiB ({config.num_requests:,} requests x "
            f"{config.output_len:,} output tokens per stage, {in_flight:,} in flight); "
            f"{available / 2**30:,.1f} GiB is available: lower --num-requests, --output-len or --concurrency"
        )


def prepare(config: BenchConfig) -> Prepared:
    """Check everything that can be checked without the server; raises BenchConfigError."""
    check_config(config)
    try:
        endpoint = parse_url(config.url)
    except ValueError as exc:
        raise BenchConfigError(str(exc)) from None
    notes: list[str] = []
    specs = stages(config, notes)
    for flag, path in (("--json", config.json_path), ("--plot", config.plot_path)):
        if path is not None:
            check_output_path(path, flag)
    if config.plot_path is not None and not plot_available():
        raise BenchConfigError(
            "--plot needs matplotlib, which is not installed here (pip install 'sglnode[plot]'); "
            "or drop --plot: the table and --json carry every figure"
        )
    check_capacity(config, specs)
    roofline = load_plan(config.plan_path) if config.plan_path else None
    prompts = PromptSpec(
        input_len=config.input_len,
        seed=config.seed,
        workload=config.workload,  # type: ignore[arg-type]
        prefix_len=config.prefix_len,
        prefix_groups=config.prefix_groups,
    )
    notes += unchecked(
        config.targets,
        [{"label": s.label, "concurrency": s.concurrency, "request_rate": s.rate} for s in specs],
    )
    return Prepared(endpoint, specs, roofline, prompts, notes)


def _target(config: BenchConfig, prepared: Prepared) -> Target:
    netloc = prepared.endpoint.base_url.split("://", 1)[1]
    encoder = RequestEncoder(
        api=config.api,  # type: ignore[arg-type]
        host_header=netloc,
        output_len=config.output_len,
        body_options=BodyOptions(config.model, config.ignore_eos, config.continuous_usage),
        prompts=prepared.prompts,
        api_key=config.api_key,
    )
    return Target(
        host=prepared.endpoint.host,
        port=prepared.endpoint.port,
        api=config.api,  # type: ignore[arg-type]
        encoder=encoder,
        requested_tokens=config.output_len,
        connect_timeout_s=config.connect_timeout_s,
        request_timeout_s=config.request_timeout_s,
        stall_timeout_s=config.stall_timeout_s,
    )


class _Session:
    """The mutable state of one run, so an interruption at any point still leaves a report."""

    def __init__(self, config: BenchConfig, prepared: Prepared, out: TextIO, err: TextIO) -> None:
        self.config = config
        self.prepared = prepared
        self.out = out
        self.err = err
        self.sim: dict[str, object] = {"simulated": False, "evidence": []}
        self.summaries: list[dict[str, object]] = []
        self.interrupted: str | None = None
        self.bar = ProgressBar(err, err.isatty() if config.progress is None else config.progress)

    def report(self) -> dict[str, object]:
        config = self.config
        return {
            "schema": SCHEMA,
            "complete": False,
            "interrupted": self.interrupted,
            "target": {
                "url": self.prepared.endpoint.base_url,
                "api": config.api,
                "model": config.model,
                **self.sim,
            },
            "config": {
                "input_len": config.input_len,
                "output_len": config.output_len,
                "workload": config.workload,
                "prefix_len": config.prefix_len if config.workload == "shared-prefix" else None,
                "prefix_groups": config.prefix_groups if config.workload == "shared-prefix" else None,
                "ignore_eos": config.ignore_eos,
                "continuous_usage": config.continuous_usage,
                "num_requests": config.num_requests,
                "duration_s": config.duration_s,
                "warmup": config.warmup,
                "workers": config.workers,
                "seed": config.seed,
                "burstiness": config.burstiness if config.request_rate else None,
                "flush_cache": config.flush_cache,
                "request_timeout_s": config.request_timeout_s,
                "stall_timeout_s": config.stall_timeout_s,
            },
            "notes": list(self.prepared.notes),
            "stages": self.summaries,
            "client_saturated": any(s["client"]["saturated"] for s in self.summaries),  # type: ignore[index]
            "checks": {"enabled": False, "passed": None, "failures": [], "targets": config.targets.to_json()},
        }

    def _write_partial(self) -> None:
        if self.config.json_path:  # partial results survive a later crash or kill
            write_json(self.config.json_path, self.report())

    def execute(self) -> None:
        config, prepared = self.config, self.prepared
        for note in prepared.notes:
            self.err.write(f"sglnode bench: note: {note}\n")
        self.sim = probe_simulated(prepared.endpoint.base_url, config.api_key)
        target = _target(config, prepared)
        specs = prepared.specs
        if config.warmup:
            first = specs[0].concurrency or 1
            warm = StageSpec("warmup", min(first, config.warmup), None, config.warmup, config.duration_s, 0)
            self.bar.start("warmup", config.warmup)
            run = run_stage(target, warm, 1, config.seed, self.bar.update)
            self.bar.finish()
            if run.interrupted:
                self.interrupted = run.interrupted
                return
        slo = Slo(config.slo_ttft_ms, config.slo_tpot_ms)
        for spec in specs:
            flushed = flush_cache(prepared.endpoint.base_url, config.api_key) if config.flush_cache else None
            self.bar.start(spec.label, spec.num_requests)
            run: StageRun = run_stage(target, spec, config.workers, config.seed, self.bar.update)
            self.bar.finish()
            summary = summarize(run, slo, prepared.roofline)
            summary["cache_flush"] = flushed
            self.summaries.append(summary)
            self._write_partial()
            if run.interrupted:
                self.interrupted = run.interrupted
                return
            if summary["aborted"]:
                return

    def finish(self) -> tuple[int, dict[str, object]]:
        config = self.config
        report = self.report()
        failures = evaluate(self.summaries, config.targets)
        report["checks"] = {
            "enabled": config.targets.enabled,
            "passed": not failures and not self.interrupted,
            "failures": failures,
            "targets": config.targets.to_json(),
        }
        report["complete"] = len(self.summaries) == len(self.prepared.specs) and not self.interrupted
        if self.interrupted:
            code = signal_exit_code(self.interrupted)
        else:
            code = EXIT_TARGET_MISSED if failures else EXIT_OK
        report["exit_code"] = code
        if config.json_path:
            try:
                write_json(config.json_path, report)
            except OSError as exc:  # checked up front; the disk can still fill or vanish
                self.err.write(f"sglnode bench: could not write {config.json_path}: {exc}\n")
        print_report(report, self.out)  # the table first: a plot failure must not hide it
        if self.interrupted:
            self.out.write(
                f"INTERRUPTED by {self.interrupted}: the report holds the {len(self.summaries)} stage(s) "
                "measured so far\n"
            )
        if config.plot_path and self.summaries:
            self._plot()
        self.out.flush()
        return code, report

    def _plot(self) -> None:
        try:
            from sglnode.bench.plot import plot_sweep  # noqa: PLC0415 - matplotlib only when asked

            plot_sweep(self.summaries, self.config.plot_path, bool(self.sim["simulated"]))  # type: ignore[arg-type]
        except Exception as exc:  # matplotlib's own failures are many; the figures are already out
            self.err.write(
                f"sglnode bench: warning: the plot was not written ({type(exc).__name__}: {exc})\n"
            )


def run_session(
    config: BenchConfig, stdout: TextIO | None = None, stderr: TextIO | None = None
) -> tuple[int, dict[str, object]]:
    """Run the benchmark; (exit code, report). Raises BenchConfigError before any request is sent."""
    out = stdout if stdout is not None else sys.stdout
    err = stderr if stderr is not None else sys.stderr
    session = _Session(config, prepare(config), out, err)
    with raise_on_signals():
        try:
            session.execute()
        except Interrupted as signal_:
            session.interrupted = session.interrupted or signal_.name
            session.bar.finish()  # end the progress line the signal cut
        return session.finish()
