"""The node's deployment record: attempts, known-good states, rollback targets, crash safety."""

import contextlib
import io
import json
import multiprocessing
import subprocess
import time
from pathlib import Path

import pytest

from sglnode.cli import main
from sglnode.deploy.state import MAX_HISTORY, Deployment, StateError, StateStore

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "inventory" / "topologies"


def _deployment(store: StateStore, name: str, image: str) -> Deployment:
    sha = store.keep_topology(TOPOLOGIES / f"{name}.yml")
    return Deployment(topology_name=name, topology_sha256=sha, image_ref=image)


def test_a_good_change_becomes_the_known_good_state(tmp_path):
    store = StateStore(tmp_path)
    first = store.begin("deploy", _deployment(store, "tp8", "img:a"))
    store.finish(first.id, "ok", validate_summary={"exit_code": 0})
    state = store.read()
    assert state.known_good.topology_name == "tp8" and state.known_good.validated_at
    assert state.current == state.known_good


def test_a_failed_change_keeps_the_old_known_good_and_records_why(tmp_path):
    store = StateStore(tmp_path)
    store.finish(store.begin("deploy", _deployment(store, "tp8", "img:a")).id, "ok")
    attempt = store.begin("switch", _deployment(store, "pd-1p1d", "img:b"))
    assert attempt.previous.topology_name == "tp8"
    diagnosis = {"cause": "oom", "phase": "kv_cache"}
    state = store.finish(attempt.id, "rolled_back", diagnosis=diagnosis, downtime_s=41.5)
    assert state.known_good.topology_name == "tp8"
    assert state.current.topology_name == "tp8"  # the old one runs again
    recorded = state.attempt(attempt.id)
    assert (recorded.outcome, recorded.diagnosis, recorded.downtime_s) == ("rolled_back", diagnosis, 41.5)


def test_rollback_targets_are_every_known_good_newest_first_with_their_topology_copy(tmp_path):
    store = StateStore(tmp_path)
    for name, image in (("tp8", "img:a"), ("tp4x2", "img:a"), ("tp8", "img:a"), ("pd-1p1d", "img:b")):
        store.finish(store.begin("switch", _deployment(store, name, image)).id, "ok")
    targets = store.read().known_good_states()
    assert [t.topology_name for t in targets] == ["pd-1p1d", "tp8", "tp4x2"]
    for target in targets:
        copy = store.topology_copy(target.topology_sha256)
        assert copy.read_bytes() == (TOPOLOGIES / f"{target.topology_name}.yml").read_bytes()


def test_an_unfinished_attempt_blocks_the_next_change(tmp_path):
    store = StateStore(tmp_path)
    store.begin("deploy", _deployment(store, "tp8", "img:a"))
    with pytest.raises(StateError, match="still running"):
        store.begin("switch", _deployment(store, "tp4x2", "img:a"))


def test_history_is_bounded(tmp_path):
    store = StateStore(tmp_path)
    deployment = _deployment(store, "tp8", "img:a")
    for _ in range(MAX_HISTORY + 5):
        store.finish(store.begin("switch", deployment).id, "failed")
    history = store.read().history
    assert len(history) == MAX_HISTORY and history[-1].id == MAX_HISTORY + 5


def test_state_file_is_private_and_a_misspelled_key_is_refused(tmp_path):
    store = StateStore(tmp_path)
    store.begin("deploy", _deployment(store, "tp8", "img:a"))
    assert store.path.stat().st_mode & 0o777 == 0o640
    data = json.loads(store.path.read_text())
    data["current"]["image_reff"] = "x"
    store.path.write_text(json.dumps(data))
    with pytest.raises(StateError, match="image_reff"):
        store.read()


def _begin_and_finish(root: str, index: int) -> None:
    store = StateStore(Path(root))
    deployment = Deployment(topology_name=f"t{index}", topology_sha256="0" * 64, image_ref="img")
    while True:
        try:
            attempt = store.begin("switch", deployment)
            break
        except StateError:
            time.sleep(0.01)  # another writer's attempt is running
    store.finish(attempt.id, "ok")


def test_concurrent_writers_never_lose_an_attempt(tmp_path):
    procs = [multiprocessing.Process(target=_begin_and_finish, args=(str(tmp_path), i)) for i in range(6)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
    history = StateStore(tmp_path).read().history
    assert sorted(a.id for a in history) == list(range(1, 7))
    assert all(a.outcome == "ok" for a in history)


def _sglnode(*args):
    """The CLI in this process (a subprocess per call would spend seconds importing)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return subprocess.CompletedProcess(args, code, out.getvalue(), err.getvalue())


def test_cli_records_a_rollback_with_the_crash_diagnosis(tmp_path):
    state_dir = str(tmp_path / "state")
    begin = _sglnode(
        "state", "begin", "--state-dir", state_dir, "--action", "switch",
        "--topology", str(TOPOLOGIES / "pd-1p1d.yml"), "--topology-name", "pd-1p1d", "--image", "img:b",
    )  # fmt: skip
    assert begin.returncode == 0, begin.stderr
    attempt = json.loads(begin.stdout)
    wait = tmp_path / "wait.json"
    wait.write_text(json.dumps({"outcome": "crashed", "diagnosis": {"cause": "oom", "phase": "kv_cache"}}))
    finish = _sglnode(
        "state", "finish", "--state-dir", state_dir, "--attempt", str(attempt["id"]),
        "--outcome", "failed", "--diagnosis", str(wait), "--downtime", "12.5",
    )  # fmt: skip
    assert finish.returncode == 0, finish.stderr
    status = _sglnode("status", "--state-dir", state_dir)
    assert "switch -> pd-1p1d [img:b]: failed; diagnosis oom (kv_cache); downtime 12.5 s" in status.stdout
    assert _sglnode("state", "target", "--state-dir", state_dir).returncode == 1  # nothing known good yet
    again = _sglnode(
        "state", "finish", "--state-dir", state_dir, "--attempt", str(attempt["id"]), "--outcome", "ok"
    )
    assert again.returncode == 1 and "already finished" in again.stderr and "Traceback" not in again.stderr
