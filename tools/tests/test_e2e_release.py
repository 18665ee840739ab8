"""Safe changes on the simulated node, end to end (issue 14): playbooks/serve.yml and rollback.yml run
against docker compose stacks of simulated SGLang servers (`sglnode sim`, a TEST DOUBLE) and the real
sglang-router, with the node's deployment record in a private node_prefix.

The steps build on each other, in file order, on one node (a module fixture):
  1. deploy A (two replicas)                      -> ok, the known-good deployment            (c)
  2. switch to B (prefill-decode)                 -> ok, the new known-good, A stopped        (c)
  3. switch to a topology whose decode server dies in KV-cache allocation at startup
                                                  -> B restored and validated again; the run fails
                                                     naming the crash (oom, kv_cache)         (a)
  4. an image that fails its smoke test           -> refused; B's containers never stopped    (b)
  5. rollback.yml to known-good #1                -> A again, validated                       (d)
Every downtime printed here is measured on the simulated node: SIMULATED, not a GPU node's.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from docker_available import free_ports, image_present

from sglnode.topology import RenderOptions

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "inventory" / "topologies"
ANSIBLE_PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"
PLAYBOOK_TIMEOUT_S = 900
DOCKER_TIMEOUT_S = 180

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def _docker(*args: str, timeout: float = DOCKER_TIMEOUT_S) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)


def _topology(source: Path, name: str, out: Path) -> Path:
    """A copy of a topology under a unique name and free ports (the test shares this Docker engine)."""
    data = yaml.safe_load(source.read_text())
    data["name"] = name
    for server in data["servers"]:
        server["port"] = free_ports(1)[0]
        if "bootstrap_port" in server:
            server["bootstrap_port"] = free_ports(1)[0]
    router_port, prometheus = free_ports(2)
    data["router"].update(port=router_port, prometheus_port=prometheus)
    path = out / f"{name}.yml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


class Node:
    def __init__(self, prefix: Path, topologies: dict[str, Path]) -> None:
        self.prefix = prefix
        self.topologies = topologies
        self.state_dir = prefix / "var" / "lib" / "sglnode"

    def playbook(self, playbook: str, topology: str, **extra: object) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"),
            "ANSIBLE_NOCOLOR": "1",
            # This checkout's sglnode, whatever the venv's editable install points at.
            "PYTHONPATH": f"{REPO / 'tools'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
        }
        extra_vars = {
            "node_prefix": str(self.prefix),
            "sglang_topology_file": str(self.topologies[topology]),
            # A short rollout check: the assertions are about the switch, not the simulator's speed.
            "sglang_validate_concurrency": "1,4",
            "sglang_validate_num_requests": 8,
            "sglang_validate_duration_s": 5,
            "sglang_validate_timeout_s": 120,
            **extra,
        }
        args = [str(ANSIBLE_PLAYBOOK), "-i", "inventory/sim", playbook, "-e", json.dumps(extra_vars)]
        return subprocess.run(
            args, cwd=REPO, env=env, capture_output=True, text=True, timeout=PLAYBOOK_TIMEOUT_S, check=False
        )

    def status(self) -> dict:
        run = subprocess.run(
            [sys.executable, "-m", "sglnode", "status", "--json", "--state-dir", str(self.state_dir)],
            capture_output=True,
            text=True,
            timeout=60,
            check=True,
            env={**os.environ, "PYTHONPATH": str(REPO / "tools")},
        )
        return json.loads(run.stdout)

    def containers(self, topology: str) -> dict[str, str]:
        """Running containers of a topology's compose project: name -> StartedAt."""
        ids = _docker("ps", "-q", "--filter", f"label=com.docker.compose.project=sglang-{topology}").stdout
        found = {}
        for container in ids.split():
            inspect = _docker(
                "inspect", "--format", "{{.Name}} {{.State.StartedAt}}", container
            ).stdout.split()
            found[inspect[0]] = inspect[1]
        return found

    def router_answers(self, topology: str) -> bool:
        data = yaml.safe_load(self.topologies[topology].read_text())
        pd = any(server.get("role") == "prefill" for server in data["servers"])
        wait = subprocess.run(
            [sys.executable, "-m", "sglnode", "wait", "--url", f"http://127.0.0.1:{data['router']['port']}"]
            + (["--pd"] if pd else [])
            + ["--timeout", "30"],
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
            env={**os.environ, "PYTHONPATH": str(REPO / "tools")},
        )
        return wait.returncode == 0


def _tail(run: subprocess.CompletedProcess[str]) -> str:
    return run.stdout[-4000:] + run.stderr[-2000:]


def _changed_tasks(stdout: str) -> list[str]:
    """The TASK headers of a playbook run's output under which something changed."""
    changed, task = [], ""
    for line in stdout.splitlines():
        if line.startswith("TASK ["):
            task = line.rstrip(" *")
        elif line.startswith("changed:") and task not in changed:
            changed.append(task)
    return changed


def _report(step: str, attempt: dict) -> None:
    print(
        f"[{step}] attempt #{attempt['id']} {attempt['action']} -> {attempt['target']['topology_name']}: "
        f"{attempt['outcome']}, downtime {attempt['downtime_s']} s (SIMULATED node)"
    )


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    options = RenderOptions(runtime="sim")
    missing = [ref for ref in (options.sim_image, options.router_image) if not image_present(ref)]
    if missing:
        pytest.skip(f"images not built: {missing} (make setup builds them)")
    if not ANSIBLE_PLAYBOOK.exists():
        pytest.skip("ansible-playbook not in the venv")
    root = tmp_path_factory.mktemp("release")
    suffix = uuid.uuid4().hex[:6]
    topologies = {
        "a": _topology(TOPOLOGIES / "tp4x2.yml", f"rel-a-{suffix}", root),
        "b": _topology(TOPOLOGIES / "pd-1p1d.yml", f"rel-b-{suffix}", root),
        "oom": _topology(
            REPO / "tools" / "demo" / "topologies" / "pd-kv-starved.yml", f"rel-oom-{suffix}", root
        ),
    }
    prefix = root / "node"
    prefix.mkdir()
    try:
        yield Node(prefix, topologies)
    finally:
        # Pass or fail, nothing of this node stays up: its compose projects, then (if compose could not
        # read a project's files) any container or network still labelled with one of its projects.
        for directory in sorted((prefix / "etc" / "sglang").glob("*/")):
            files = [arg for f in ("compose.yaml", "compose.sim.yaml") for arg in ("-f", str(directory / f))]
            _docker("compose", *files, "down", "--timeout", "2")
        for path in topologies.values():
            label = f"label=com.docker.compose.project=sglang-{path.stem}"
            leftovers = _docker("ps", "--all", "--quiet", "--filter", label).stdout.split()
            if leftovers:
                _docker("rm", "--force", *leftovers)
            networks = _docker("network", "ls", "--quiet", "--filter", label).stdout.split()
            if networks:
                _docker("network", "rm", *networks)


def test_c_a_first_deployment_becomes_the_known_good_one(node):
    run = node.playbook("playbooks/serve.yml", "a")
    assert run.returncode == 0, _tail(run)
    state = node.status()
    attempt = state["history"][-1]
    _report("c: deploy", attempt)
    assert (attempt["action"], attempt["outcome"]) == ("deploy", "ok")
    assert state["known_good"]["topology_name"] == node.topologies["a"].stem
    assert state["known_good"]["validated_at"] and state["known_good"]["sim_image"]
    assert attempt["downtime_s"] > 0
    assert "SIMULATED node" in run.stdout

    again = node.playbook("playbooks/serve.yml", "a")
    assert again.returncode == 0, _tail(again)
    assert " changed=0 " in again.stdout, (
        f"a second converge with nothing to change changed something: {_changed_tasks(again.stdout)}"
    )
    assert len(node.status()["history"]) == 1  # nothing new recorded


def test_c_a_good_switch_is_recorded_as_the_new_known_good_with_its_downtime(node):
    run = node.playbook("playbooks/serve.yml", "b")
    assert run.returncode == 0, _tail(run)
    state = node.status()
    attempt = state["history"][-1]
    _report("c: switch", attempt)
    assert (attempt["action"], attempt["outcome"]) == ("switch", "ok")
    assert attempt["previous"]["topology_name"] == node.topologies["a"].stem
    assert (
        state["known_good"]["topology_name"] == state["current"]["topology_name"] == node.topologies["b"].stem
    )
    assert 0 < attempt["downtime_s"] < 300
    assert node.containers(node.topologies["a"].stem) == {}  # the old topology was stopped
    assert node.router_answers("b")


def test_a_a_topology_that_crashes_at_startup_is_rolled_back_and_the_run_names_the_crash(node):
    # The planner would refuse this topology before anything stops (see the refused attempt in
    # test_b); with the memory preflight off it reaches the node, as a topology the planner misjudged
    # would, and its decode server dies in KV-cache allocation like the pinned SGLang.
    preflight_off = {"sglang_serve_memory_preflight": False, "nccl_env_memory_preflight": False}
    run = node.playbook("playbooks/serve.yml", "oom", **preflight_off)
    assert run.returncode != 0, _tail(run)
    assert "failed its rollout check: decode0 oom in phase kv_cache" in run.stdout, _tail(run)
    assert f"Rolled back to {node.topologies['b'].stem}" in run.stdout
    state = node.status()
    attempt = state["history"][-1]
    _report("a: crash + automatic rollback", attempt)
    assert attempt["outcome"] == "rolled_back"
    assert (attempt["diagnosis"]["cause"], attempt["diagnosis"]["phase"]) == ("oom", "kv_cache")
    assert attempt["diagnosis"]["server"] == "decode0"
    assert attempt["downtime_s"] > 0
    assert (
        state["current"]["topology_name"] == state["known_good"]["topology_name"] == node.topologies["b"].stem
    )
    kept = node.state_dir / "attempts" / str(attempt["id"]) / "report.json"
    assert json.loads(kept.read_text())["exit_code"] == 2  # the failed check's own report is kept
    assert node.containers(node.topologies["oom"].stem) == {}  # the crashing topology is not left looping
    assert node.router_answers("b")


def test_b_an_image_that_fails_its_smoke_test_never_stops_the_running_service(node, tmp_path):
    broken = f"sglnode/sim-broken-test:{uuid.uuid4().hex[:8]}"
    context = tmp_path / "broken"
    context.mkdir()
    # TEST FIXTURE: the simulator image with its server module missing, as a bad build would leave it.
    (context / "Dockerfile").write_text(
        f"FROM {RenderOptions(runtime='sim').sim_image}\nUSER root\n"
        "RUN rm -rf /opt/sglnode/lib/python3*/site-packages/sglnode/sim\nUSER 10002\n"
    )
    build = subprocess.run(
        ["docker", "build", "--quiet", "--tag", broken, str(context)],
        capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=False,
        env={**os.environ, "DOCKER_BUILDKIT": "0"},
    )  # fmt: skip
    assert build.returncode == 0, build.stderr
    try:
        before = node.containers(node.topologies["b"].stem)
        assert before
        started = time.monotonic()
        run = node.playbook("playbooks/serve.yml", "b", sglang_serve_sim_image=broken)
        assert run.returncode != 0, _tail(run)
        assert "refused before anything stopped (image_smoke_failed)" in run.stdout, _tail(run)
        assert node.containers(node.topologies["b"].stem) == before  # same containers, never restarted
        assert node.router_answers("b")
        state = node.status()
        attempt = state["history"][-1]
        _report(f"b: image smoke failed ({time.monotonic() - started:.0f} s playbook)", attempt)
        assert (attempt["outcome"], attempt["downtime_s"]) == ("refused", 0.0)
        assert attempt["diagnosis"]["cause"] == "image_smoke_failed"
        assert state["current"]["sim_image"] != broken
        assert state["current"]["topology_name"] == node.topologies["b"].stem
    finally:
        _docker("image", "rm", "--force", broken)


def test_d_rollback_playbook_restores_an_older_known_good_state(node):
    targets = subprocess.run(
        [sys.executable, "-m", "sglnode", "state", "target", "--index", "1",
         "--state-dir", str(node.state_dir)],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO / "tools")},
    )  # fmt: skip
    assert targets.returncode == 0, targets.stderr
    assert json.loads(targets.stdout)["topology_name"] == node.topologies["a"].stem
    run = node.playbook("playbooks/rollback.yml", "b", sglang_release_rollback_index=1)
    assert run.returncode == 0, _tail(run)
    state = node.status()
    attempt = state["history"][-1]
    _report("d: rollback.yml #1", attempt)
    assert (attempt["action"], attempt["outcome"]) == ("rollback", "ok")
    assert (
        state["current"]["topology_name"] == state["known_good"]["topology_name"] == node.topologies["a"].stem
    )
    assert attempt["downtime_s"] > 0
    assert node.containers(node.topologies["b"].stem) == {}
    assert node.router_answers("a")

    missing = node.playbook("playbooks/rollback.yml", "b", sglang_release_rollback_index=9)
    assert missing.returncode != 0
    assert "Cannot roll back to known-good deployment #9" in missing.stdout
    assert "Traceback" not in missing.stdout + missing.stderr
    assert len(node.status()["history"]) == len(state["history"])  # nothing was attempted


def test_a_server_that_crashes_at_startup_is_restarted_a_bounded_number_of_times(tmp_path):
    """compose `restart: on-failure:N`: a KV-budget crash at startup is retried N times, then the
    container stays exited (a 146 GB checkpoint must not reload in a loop), and `sglnode wait` names it."""
    from sglnode.cli import main  # noqa: PLC0415

    options = RenderOptions(runtime="sim")
    if not image_present(options.sim_image):
        pytest.skip(f"image not built: {options.sim_image}")
    name = f"loop-{uuid.uuid4().hex[:6]}"
    topology = _topology(REPO / "tools" / "demo" / "topologies" / "pd-kv-starved.yml", name, tmp_path)
    assert (
        main(["topology", "render", str(topology), "--out", str(tmp_path / "node"), "--runtime", "sim"]) == 0
    )
    decode_port = yaml.safe_load(topology.read_text())["servers"][1]["port"]
    directory = tmp_path / "node" / "etc" / "sglang" / name
    compose = ["compose", "-f", str(directory / "compose.yaml"), "-f", str(directory / "compose.sim.yaml")]
    assert "restart: on-failure:2" in (directory / "compose.yaml").read_text()
    up = _docker(*compose, "up", "--detach", "--pull", "never", "decode0")
    try:
        assert up.returncode == 0, up.stderr
        deadline = time.monotonic() + 150
        state = {}
        while time.monotonic() < deadline:
            container = _docker(*compose, "ps", "--all", "--quiet", "decode0").stdout.strip()
            raw = _docker("inspect", "--format", "{{json .State}} {{.RestartCount}}", container).stdout
            if raw.strip():
                state_json, restarts = raw.rsplit(" ", 1)
                state = {**json.loads(state_json), "restarts": int(restarts)}
                if state["Status"] == "exited" and not state["Restarting"] and state["restarts"] >= 2:
                    break
            time.sleep(1)
        assert state.get("Status") == "exited", state
        assert state["restarts"] == 2 and state["ExitCode"] != 0
        time.sleep(5)  # and it stays down
        assert _docker(
            "inspect", "--format", "{{.RestartCount}} {{.State.Status}}", container
        ).stdout.split() == [
            "2",
            "exited",
        ]
        waited = subprocess.run(
            [sys.executable, "-m", "sglnode", "wait", "--url", f"http://127.0.0.1:{decode_port}",
             "--compose-file", str(directory / "compose.yaml"), "--service", "decode0",
             "--timeout", "60", "--json"],
            capture_output=True, text=True, timeout=120, check=False,
            env={**os.environ, "PYTHONPATH": str(REPO / "tools")},
        )  # fmt: skip
        assert waited.returncode == 2, waited.stdout[-2000:] + waited.stderr[-2000:]
        diagnosis = json.loads(waited.stdout)["diagnosis"]
        assert (diagnosis["cause"], diagnosis["phase"]) == ("oom", "kv_cache")
    finally:
        _docker(*compose, "down", "--timeout", "2")
