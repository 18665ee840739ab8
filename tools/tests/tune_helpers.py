"""Shared pieces of the tune tests: a spec on disk, and a fake deployer that records every call."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
DEMO = REPO / "tools" / "demo" / "tune"


def write_spec(tmp_path: Path, **changes: Any) -> Path:
    data = yaml.safe_load((DEMO / "sweep.yml").read_text())
    data["base"] = str(DEMO / "tp4.yml")
    data["axes"]["topologies"] = [str(DEMO / "tp8.yml")]
    for key, value in changes.items():
        if value is None:
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / "sweep.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def stage(concurrency: int, tok_s: float, itl_p99: float = 20.0, ttft_p99: float = 100.0, errors: int = 0):
    sent = 16
    return {
        "concurrency": concurrency,
        "wall_s": 5.0,
        "output_tok_s": tok_s,
        "requests": {"sent": sent, "ok": sent - errors, "error_rate": errors / sent},
        "ttft_ms": {"p50": ttft_p99 / 2, "p99": ttft_p99},
        "itl_ms": {"p50": itl_p99 / 2, "p99": itl_p99},
        "tpot_ms": {"p50": itl_p99 / 2},
        "e2e_ms": {"p50": 500.0},
        "tokens": {"mean_output_tokens": 32},
        "client": {"saturated": False},
        "aborted": None,
    }


class FakeDeployment:
    def __init__(self, candidate_id: str, topology: Any) -> None:
        self.candidate_id = candidate_id
        self.topology = topology


class FakeDeployer:
    """Stands in for docker compose. `behaviour[label]` decides a candidate's fate:
    crash | timeout | leak | sigterm_in_bench | deploy_error; throughput comes from `speed[label]`."""

    def __init__(self, clock=None, behaviour=None, speed=None, stage_seconds=0.0, startup_seconds=0.0):
        self.calls: list[tuple[str, ...]] = []
        self.behaviour = behaviour or {}
        self.speed = speed or {}
        self.clock = clock
        self.stage_seconds = stage_seconds
        self.startup_seconds = startup_seconds
        self.labels: dict[str, str] = {}

    def _label(self, deployment: FakeDeployment) -> str:
        return self.labels.get(deployment.candidate_id, "")

    def cleanup_stale(self):
        self.calls.append(("cleanup",))
        return []

    def prepare(self, candidate_id, topology):
        self.calls.append(("prepare", candidate_id))
        return FakeDeployment(candidate_id, topology)

    def up(self, deployment):
        self.calls.append(("up", deployment.candidate_id))
        if self.behaviour.get(self._label(deployment)) == "deploy_error":
            raise RuntimeError("docker compose up failed: no such image")

    def wait(self, deployment, timeout_s):
        self.calls.append(("wait", deployment.candidate_id, f"{timeout_s:.0f}"))
        if self.clock is not None:
            self.clock.advance(min(self.startup_seconds, timeout_s))
        fate = self.behaviour.get(self._label(deployment))
        name = deployment.topology.servers[0].name
        if fate == "crash":
            diagnosis = {
                "cause": "oom",
                "phase": "kv_cache",
                "fix": "raise --mem-fraction-static",
                "evidence": [{"text": "ValueError: Loaded weights leave no GPU memory for the KV cache"}],
            }
            waits = [{"server": name, "outcome": "crashed", "stage": "kv_cache", "diagnosis": diagnosis}]
            return {"outcome": "crashed", "failed_server": name, "elapsed_s": 3.0, "waits": waits}
        if fate == "timeout":
            waits = [{"server": name, "outcome": "timed_out", "stage": "load_weights", "diagnosis": None}]
            return {"outcome": "timed_out", "failed_server": name, "elapsed_s": timeout_s, "waits": waits}
        waits = [{"server": name, "outcome": "ready"}, {"server": "router", "outcome": "ready"}]
        return {"outcome": "ready", "failed_server": None, "elapsed_s": 1.0, "waits": waits}

    def flush(self, deployment):
        self.calls.append(("flush", deployment.candidate_id))
        return []

    def bench(self, deployment, concurrency, duration_s, json_path):
        self.calls.append(("bench", deployment.candidate_id, str(concurrency), f"{duration_s:.0f}"))
        if self.behaviour.get(self._label(deployment)) == "sigterm_in_bench":
            os.kill(os.getpid(), signal.SIGTERM)
        if self.clock is not None:
            self.clock.advance(min(self.stage_seconds, duration_s))
        tok_s = self.speed.get(self._label(deployment), 100.0) * concurrency
        return {"target": {"simulated": True}, "stages": [stage(concurrency, tok_s)]}

    def down(self, deployment, timeout_s):
        self.calls.append(("down", deployment.candidate_id))
        if self.behaviour.get(self._label(deployment)) == "leak":
            return ["containers still present: ['abc123']"]
        return []

    def count(self, kind: str) -> int:
        return sum(1 for call in self.calls if call[0] == kind)


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds
