"""The sweep: every candidate deployed, waited for, benchmarked and torn down, one at a time.

Resumable: `state.json` in the output directory records each candidate as it goes (written atomically
after every step). A rerun skips candidates that reached a final status and reruns the ones that were
running or interrupted (a partial result is never mixed with a new one).

Bounded: each candidate has `budget.candidate_s` end to end; the startup wait gets what is left after
the teardown reserve, the bench stages share the rest (each at most `bench.duration_s`), and a stage
that would be shorter than `budget.min_stage_s` is not started (status over_budget, stages so far kept).

Signals: SIGINT/SIGTERM tear the current candidate down, mark it interrupted and write the results so
far (exit 130 / 143). A second signal during the teardown is held until the teardown is done.

A leak (a container or a listening port left after `down`) stops the sweep: the next candidate's
figures would not be fair.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

from sglnode import __version__
from sglnode.tune.candidates import Candidate
from sglnode.tune.spec import LoadedSpec

STATE_SCHEMA = 1
# Statuses a resumed sweep does not rerun.
FINAL = (
    "done",
    "over_budget",
    "crashed",
    "startup_timeout",
    "unreachable",
    "invalid",
    "refused_kernels",
    "refused_memory",
)
WAIT_STATUS = {"crashed": "crashed", "timed_out": "startup_timeout", "unreachable": "unreachable"}
EVIDENCE_LINES = 4


class SweepInterrupted(BaseException):
    """SIGINT/SIGTERM arrived; BaseException so no library's `except Exception` swallows it."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"signal {signum}")
        self.signum = signum


class SweepAborted(RuntimeError):
    """The node is not clean after a candidate: running on would make the next result unfair."""


class Deployer(Protocol):
    def cleanup_stale(self) -> list[str]: ...
    def prepare(self, candidate_id: str, topology: Any) -> Any: ...
    def up(self, deployment: Any) -> None: ...
    def wait(self, deployment: Any, timeout_s: float) -> dict[str, Any]: ...
    def flush(self, deployment: Any) -> list[str]: ...
    def bench(
        self, deployment: Any, concurrency: int, duration_s: float, json_path: Path
    ) -> dict[str, Any]: ...
    def down(self, deployment: Any, timeout_s: float) -> list[str]: ...


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def write_json_atomic(path: Path, data: Any) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n", encoding="utf-8")
    os.replace(tmp, path)


@dataclass
class State:
    path: Path
    data: dict[str, Any]

    @classmethod
    def open(cls, path: Path, loaded: LoadedSpec, resume: bool) -> State:
        if resume and path.exists():
            data = json.loads(path.read_text(encoding="utf-8"))
            if data.get("schema") != STATE_SCHEMA or data.get("sweep") != loaded.spec.name:
                raise ValueError(f"{path} is not the state of sweep {loaded.spec.name}; use another --out")
            data["resumed"] = [*data.get("resumed", []), _now()]
        else:
            data = {"schema": STATE_SCHEMA, "sweep": loaded.spec.name, "created": _now(), "candidates": {}}
        data.update(spec_file=str(loaded.path), spec_sha256=loaded.sha256, sglnode=__version__)
        return cls(path, data)

    def record(self, candidate_id: str) -> dict[str, Any] | None:
        return self.data["candidates"].get(candidate_id)

    def put(self, candidate_id: str, record: dict[str, Any]) -> None:
        self.data["candidates"][candidate_id] = record
        self.save()

    def save(self) -> None:
        self.data["updated"] = _now()
        write_json_atomic(self.path, self.data)


class _Signals:
    """SIGINT/SIGTERM raise SweepInterrupted in the main thread, except while held (teardown)."""

    def __init__(self) -> None:
        self.held = False
        self.pending: int | None = None
        self.previous: dict[int, Any] = {}

    def _handler(self, signum: int, _frame: object) -> None:
        if self.held:
            self.pending = self.pending or signum
            return
        raise SweepInterrupted(signum)

    def install(self) -> None:
        for signum in (signal.SIGINT, signal.SIGTERM):
            self.previous[signum] = signal.signal(signum, self._handler)

    def restore(self) -> None:
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)

    @contextmanager
    def hold(self) -> Iterator[None]:
        self.held = True
        try:
            yield
        finally:
            self.held = False
            if self.pending is not None:
                signum, self.pending = self.pending, None
                raise SweepInterrupted(signum)


def compact_stage(stage: dict[str, Any], asked_s: float, json_path: Path) -> dict[str, Any]:
    def pct(key: str, name: str) -> float | None:
        return (stage.get(key) or {}).get(name)

    return {
        "concurrency": stage.get("concurrency"),
        "duration_s": round(asked_s, 2),
        "wall_s": stage.get("wall_s"),
        "output_tok_s": stage.get("output_tok_s"),
        "ttft_p50_ms": pct("ttft_ms", "p50"),
        "ttft_p99_ms": pct("ttft_ms", "p99"),
        "itl_p50_ms": pct("itl_ms", "p50"),
        "itl_p99_ms": pct("itl_ms", "p99"),
        "tpot_p50_ms": pct("tpot_ms", "p50"),
        "e2e_p50_ms": pct("e2e_ms", "p50"),
        "requests_ok": (stage.get("requests") or {}).get("ok"),
        "requests_sent": (stage.get("requests") or {}).get("sent"),
        "error_rate": (stage.get("requests") or {}).get("error_rate"),
        "mean_output_tokens": (stage.get("tokens") or {}).get("mean_output_tokens"),
        "client_saturated": (stage.get("client") or {}).get("saturated"),
        "aborted": stage.get("aborted"),
        "bench_json": str(json_path),
    }


def _compact_wait(wait: dict[str, Any]) -> dict[str, Any]:
    failed = next((w for w in wait["waits"] if w["server"] == wait.get("failed_server")), None)
    out: dict[str, Any] = {
        "outcome": wait["outcome"],
        "elapsed_s": wait.get("elapsed_s"),
        "servers": {w["server"]: w["outcome"] for w in wait["waits"]},
    }
    if failed is not None:
        diagnosis = failed.get("diagnosis") or {}
        out["failed_server"] = failed["server"]
        out["stage"] = failed.get("stage")
        out["diagnosis"] = {
            "cause": diagnosis.get("cause"),
            "phase": diagnosis.get("phase"),
            "fix": diagnosis.get("fix"),
            "evidence": [e.get("text") for e in (diagnosis.get("evidence") or [])[:EVIDENCE_LINES]],
        }
    return out


@dataclass
class SweepRun:
    """What run_sweep returns: the state, whether it finished, and the signal that stopped it."""

    state: State
    complete: bool
    interrupted_by: int | None = None
    aborted: str | None = None
    notes: list[str] = field(default_factory=list)


class Sweep:
    def __init__(
        self,
        loaded: LoadedSpec,
        candidates: list[Candidate],
        deployer: Deployer,
        out_dir: Path,
        *,
        resume: bool = True,
        clock: Callable[[], float] = time.monotonic,
        log: Callable[[str], None] = print,
    ) -> None:
        self.loaded = loaded
        self.spec = loaded.spec
        self.candidates = candidates
        self.deployer = deployer
        self.out_dir = out_dir
        self.clock = clock
        self.log = log
        out_dir.mkdir(parents=True, exist_ok=True)
        self.state = State.open(out_dir / "state.json", loaded, resume)
        self.signals = _Signals()

    def run(self) -> SweepRun:
        outcome = SweepRun(self.state, complete=False)
        self.signals.install()
        try:
            stale = self.deployer.cleanup_stale()
            if stale:
                outcome.notes.append(f"removed leftovers of an earlier run: {stale}")
                self.log(f"tune: removed leftovers of an earlier run: {', '.join(stale)}")
            for index, candidate in enumerate(self.candidates, 1):
                self._one(index, candidate)
            outcome.complete = True
        except SweepInterrupted as exc:
            outcome.interrupted_by = exc.signum
            self.log(f"tune: interrupted by signal {exc.signum}; partial results kept")
        except SweepAborted as exc:
            outcome.aborted = str(exc)
            self.log(f"tune: aborted: {exc}")
        finally:
            self.signals.restore()
            self.state.data["complete"] = outcome.complete
            self.state.save()
        return outcome

    def _one(self, index: int, candidate: Candidate) -> None:
        total = len(self.candidates)
        head = f"tune: [{index}/{total}] {candidate.id} {candidate.label}"
        previous = self.state.record(candidate.id)
        if previous and previous["status"] in FINAL:
            self.log(f"{head}: {previous['status']} in an earlier run, skipped")
            return
        record: dict[str, Any] = {
            **candidate.to_json(),
            "index": index,
            "status": candidate.verdict,
            "stages": [],
            "started": _now(),
            "attempts": (previous or {}).get("attempts", 0),
        }
        if not candidate.deployable:
            record["finished"] = record["started"]
            self.state.put(candidate.id, record)
            self.log(f"{head}: {candidate.verdict}: {candidate.reasons[0] if candidate.reasons else ''}")
            return
        record["status"] = "running"
        record["attempts"] += 1
        self.state.put(candidate.id, record)
        self.log(f"{head}: deploying")
        self._deploy_and_measure(candidate, record)

    def _deploy_and_measure(self, candidate: Candidate, record: dict[str, Any]) -> None:
        budget = self.spec.budget
        started = self.clock()
        deadline = started + budget.candidate_s
        directory = self.out_dir / "candidates" / candidate.id
        directory.mkdir(parents=True, exist_ok=True)
        deployment = None
        leaks: list[str] = []
        try:
            deployment = self.deployer.prepare(candidate.id, candidate.topology)
            self.deployer.up(deployment)
            record["status"] = self._measure(deployment, record, deadline, directory)
        except SweepInterrupted:
            record["status"] = "interrupted"
            raise
        except Exception as exc:  # a deploy or bench failure ends this candidate, not the sweep
            record["status"] = "deploy_failed"
            record["reasons"] = [f"{type(exc).__name__}: {exc}"]
        finally:
            with self.signals.hold():
                if deployment is not None:
                    leaks = self.deployer.down(deployment, budget.teardown_s)
                elapsed = self.clock() - started
                record.update(
                    finished=_now(),
                    elapsed_s=round(elapsed, 2),
                    budget_s=budget.candidate_s,
                    exceeded_budget=elapsed > budget.candidate_s,
                    leaks=leaks,
                )
                self.state.put(candidate.id, record)
                self.log(f"tune:   -> {record['status']} ({elapsed:.1f} s){self._figures(record)}")
        if leaks:
            raise SweepAborted(f"candidate {candidate.id} left {leaks}")

    def _measure(self, deployment: Any, record: dict[str, Any], deadline: float, directory: Path) -> str:
        budget = self.spec.budget
        reserve = budget.teardown_s
        startup = min(budget.startup_s, deadline - self.clock() - reserve)
        if startup <= 0:
            return "over_budget"
        wait = self.deployer.wait(deployment, startup)
        record["wait"] = _compact_wait(wait)
        self.state.save()
        if wait["outcome"] != "ready":
            return WAIT_STATUS.get(wait["outcome"], "crashed")
        levels = self.spec.bench.concurrency
        for position, concurrency in enumerate(levels):
            left = deadline - self.clock() - reserve
            asked = min(self.spec.bench.duration_s, left / (len(levels) - position))
            if asked < budget.min_stage_s:
                record["reasons"] = [
                    f"budget: {left:.0f} s left for {len(levels) - position} stage(s) "
                    f"(minimum {budget.min_stage_s:g} s each)"
                ]
                return "over_budget"
            flush_failures = self.deployer.flush(deployment)
            if flush_failures:
                record["notes"] = [*record.get("notes", []), *(f"flush_cache: {f}" for f in flush_failures)]
            json_path = directory / f"bench-c{concurrency}.json"
            report = self.deployer.bench(deployment, concurrency, asked, json_path)
            record["simulated"] = bool(
                record.get("simulated") or (report.get("target") or {}).get("simulated")
            )
            for stage in report.get("stages") or []:
                record["stages"].append(compact_stage(stage, asked, json_path))
            self.state.save()
        return "done"

    @staticmethod
    def _figures(record: dict[str, Any]) -> str:
        if record["stages"]:
            best = max(record["stages"], key=lambda s: s.get("output_tok_s") or 0.0)
            tag = " [SIMULATED]" if record.get("simulated") else ""
            return f"; best {best['output_tok_s']:.1f} output tok/s at c={best['concurrency']}{tag}"
        diagnosis = (record.get("wait") or {}).get("diagnosis")
        if diagnosis and diagnosis.get("cause"):
            return f"; {record['wait'].get('failed_server')}: {diagnosis['cause']}"
        return ""
