"""What is deployed on the node, what was last known good, and every change attempted.

The state lives in one JSON file on the node (default /var/lib/sglnode/state.json) next to a copy of
every topology file that was ever deployed (topologies/<sha256>.yml), so a rollback restores exactly
what ran, even after the inventory's file was edited. Writers take an exclusive lock and replace the
file atomically: a killed playbook never leaves half a state. History is bounded.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
DEFAULT_STATE_DIR = Path("/var/lib/sglnode")
STATE_FILE = "state.json"
TOPOLOGIES_DIR = "topologies"
LOCK_FILE = "state.lock"
MAX_HISTORY = 50
ACTIONS = ("deploy", "switch", "upgrade", "rollback")
# ok: passed its rollout check (the new known-good); failed: did not, and nothing was restored;
# rolled_back: did not, and the previous deployment runs again; refused: stopped by the checks that run
# before anything stops (image smoke, topology preflight), so the previous deployment never stopped.
OUTCOMES = ("running", "ok", "failed", "rolled_back", "refused")


class StateError(ValueError):
    """The state file is unreadable, or a transition is not allowed."""


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@dataclass(frozen=True)
class Deployment:
    """One deployable state of the node: topology, image, and the host stack under them."""

    topology_name: str
    topology_sha256: str
    image_ref: str
    image_id: str = ""  # the engine's image ID (content digest) when known
    router_image: str = ""  # the sglang-router image the topology's router runs
    # The simulated node only: the simulator image (a test double) that serves in place of image_ref.
    sim_image: str = ""
    sim_image_id: str = ""
    driver_version: str = ""
    cuda_version: str = ""
    validated_at: str = ""
    validate_summary: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Deployment:
        known = set(cls.__dataclass_fields__)
        unknown = set(data) - known
        if unknown:
            raise StateError(f"deployment has unknown keys {sorted(unknown)}")
        return cls(**data)

    def identity(self) -> tuple[str, str, str, str]:
        """What makes two deployments the same one: the topology's content and the images it runs."""
        return (self.topology_sha256, self.image_ref, self.router_image, self.sim_image)


@dataclass(frozen=True)
class Attempt:
    """One change tried on the node, and how it ended."""

    id: int
    action: str
    started_at: str
    target: Deployment
    previous: Deployment | None
    outcome: str = "running"
    finished_at: str = ""
    diagnosis: dict[str, Any] | None = None  # the failing server's diagnosis (cause, phase, fix)
    downtime_s: float | None = None  # seconds without a ready router
    note: str = ""

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Attempt:
        data = dict(data)
        data["target"] = Deployment.from_json(data["target"])
        data["previous"] = Deployment.from_json(data["previous"]) if data.get("previous") else None
        return cls(**data)


@dataclass(frozen=True)
class NodeState:
    current: Deployment | None = None  # what runs now (or ran last)
    known_good: Deployment | None = None  # the last deployment that passed the rollout check
    history: tuple[Attempt, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "schema_version": SCHEMA_VERSION,
            "current": asdict(self.current) if self.current else None,
            "known_good": asdict(self.known_good) if self.known_good else None,
            "history": [asdict(attempt) for attempt in self.history],
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeState:
        if data.get("schema_version") != SCHEMA_VERSION:
            raise StateError(
                f"state schema {data.get('schema_version')!r}, this sglnode reads {SCHEMA_VERSION}"
            )
        return cls(
            current=Deployment.from_json(data["current"]) if data.get("current") else None,
            known_good=Deployment.from_json(data["known_good"]) if data.get("known_good") else None,
            history=tuple(Attempt.from_json(a) for a in data.get("history") or ()),
        )

    def attempt(self, attempt_id: int) -> Attempt:
        for attempt in self.history:
            if attempt.id == attempt_id:
                return attempt
        raise StateError(f"no attempt {attempt_id} in the history")

    def known_good_states(self) -> list[Deployment]:
        """Every deployment that once passed, newest first, without repeats (rollback targets)."""
        seen: dict[tuple[str, ...], Deployment] = {}
        for attempt in reversed(self.history):
            if attempt.outcome == "ok":
                seen.setdefault(attempt.target.identity(), attempt.target)
        return list(seen.values())


class StateStore:
    """The state directory on the node: state.json, the topology copies, and the writers' lock."""

    def __init__(self, root: Path = DEFAULT_STATE_DIR) -> None:
        self.root = root

    @property
    def path(self) -> Path:
        return self.root / STATE_FILE

    def topology_copy(self, sha256: str) -> Path:
        return self.root / TOPOLOGIES_DIR / f"{sha256}.yml"

    def read(self) -> NodeState:
        if not self.path.exists():
            return NodeState()
        try:
            return NodeState.from_json(json.loads(self.path.read_text(encoding="utf-8")))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise StateError(f"cannot read {self.path}: {exc}") from exc

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o750)
        with (self.root / LOCK_FILE).open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def write(self, state: NodeState) -> None:
        self.root.mkdir(parents=True, exist_ok=True, mode=0o750)
        fd, tmp = tempfile.mkstemp(dir=self.root, prefix=".state.", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as handle:
                json.dump(state.to_json(), handle, indent=2)
                handle.write("\n")
                handle.flush()
                os.fsync(handle.fileno())
            os.chmod(tmp, 0o640)
            os.replace(tmp, self.path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise

    def keep_topology(self, topology_file: Path) -> str:
        """Copy a topology file into the store (content-addressed); its sha256."""
        data = topology_file.read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        copy = self.topology_copy(sha)
        if not copy.exists():
            copy.parent.mkdir(parents=True, exist_ok=True, mode=0o750)
            copy.write_bytes(data)
        return sha

    # --- transitions ------------------------------------------------------------------------------
    def begin(self, action: str, target: Deployment, note: str = "") -> Attempt:
        if action not in ACTIONS:
            raise StateError(f"action {action!r} not one of {ACTIONS}")
        with self.locked():
            state = self.read()
            running = [a for a in state.history if a.outcome == "running"]
            if running:
                raise StateError(
                    f"attempt {running[-1].id} ({running[-1].action}) is still running: finish it first "
                    "(sglnode state finish --attempt ID --outcome failed) if its playbook died"
                )
            next_id = max((a.id for a in state.history), default=0) + 1
            attempt = Attempt(next_id, action, now(), target, state.current, note=note)
            history = (*state.history, attempt)[-MAX_HISTORY:]
            self.write(replace(state, current=target, history=history))
            return attempt

    def finish(
        self,
        attempt_id: int,
        outcome: str,
        diagnosis: dict[str, Any] | None = None,
        downtime_s: float | None = None,
        validate_summary: dict[str, Any] | None = None,
    ) -> NodeState:
        if outcome not in OUTCOMES or outcome == "running":
            raise StateError(f"outcome {outcome!r} not one of {OUTCOMES[1:]}")
        with self.locked():
            state = self.read()
            attempt = state.attempt(attempt_id)
            if attempt.outcome != "running":
                raise StateError(f"attempt {attempt_id} already finished ({attempt.outcome})")
            target = attempt.target
            if outcome == "ok":
                target = replace(target, validated_at=now(), validate_summary=validate_summary or {})
            done = replace(
                attempt,
                target=target,
                outcome=outcome,
                finished_at=now(),
                diagnosis=diagnosis,
                downtime_s=downtime_s,
            )
            history = tuple(done if a.id == attempt_id else a for a in state.history)
            current = target if outcome == "ok" else state.current
            if outcome in ("rolled_back", "refused"):
                current = attempt.previous  # the old deployment runs again (or never stopped)
            known_good = target if outcome == "ok" else state.known_good
            updated = NodeState(current=current, known_good=known_good, history=history)
            self.write(updated)
            return updated


def describe(deployment: Deployment | None, store: StateStore, copy_path: bool = True) -> str:
    if deployment is None:
        return "none"
    copy = f", {store.topology_copy(deployment.topology_sha256)}" if copy_path else ""
    validated = f", validated {deployment.validated_at}" if deployment.validated_at else ""
    parts = [
        f"image {deployment.image_ref}" + (f" ({deployment.image_id[:19]})" if deployment.image_id else ""),
        f"router {deployment.router_image}" if deployment.router_image else "",
        f"simulator {deployment.sim_image} (TEST DOUBLE)" if deployment.sim_image else "",
        f"driver {deployment.driver_version}" if deployment.driver_version else "",
        f"CUDA {deployment.cuda_version}" if deployment.cuda_version else "",
    ]
    return (
        f"{deployment.topology_name} (topology {deployment.topology_sha256[:12]}{copy}), "
        f"{', '.join(part for part in parts if part)}{validated}"
    )


def describe_diagnosis(diagnosis: dict[str, Any] | None) -> str:
    if not diagnosis:
        return ""
    where = f"{diagnosis['server']}: " if diagnosis.get("server") else ""
    phase = f" ({diagnosis['phase']})" if diagnosis.get("phase") else ""
    text = str(diagnosis.get("detail") or "")
    detail = f" - {text[:117] + '...' if len(text) > 120 else text}" if text else ""
    return f"{where}{diagnosis.get('cause')}{phase}{detail}"


def render_status(state: NodeState, store: StateStore) -> str:
    lines = [
        f"current:    {describe(state.current, store)}",
        f"known good: {describe(state.known_good, store, copy_path=False)}",
        "rollback targets (playbooks/rollback.yml -e sglang_release_rollback_index=N, newest first):",
    ]
    targets = state.known_good_states()
    if not targets:
        lines.append("  (none: nothing has passed its rollout check yet)")
    lines += [f"  [{i}] {describe(target, store, copy_path=False)}" for i, target in enumerate(targets)]
    lines.append("history:")
    if not state.history:
        lines.append("  (no attempts recorded)")
    for attempt in reversed(state.history):
        cause = f"; diagnosis {describe_diagnosis(attempt.diagnosis)}" if attempt.diagnosis else ""
        simulated = " (SIMULATED node: the servers were a test double)" if attempt.target.sim_image else ""
        downtime = ""
        if attempt.downtime_s is not None:
            downtime = f"; downtime {attempt.downtime_s:.1f} s{simulated}"
        note = f" ({attempt.note})" if attempt.note else ""
        lines.append(
            f"  #{attempt.id} {attempt.started_at} {attempt.action} -> {attempt.target.topology_name} "
            f"[{attempt.target.image_ref}]: {attempt.outcome}{cause}{downtime}{note}"
        )
    return "\n".join(lines)
