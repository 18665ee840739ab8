"""One candidate on the node: render its files, `docker compose up`, wait, bench, `docker compose down`.

The files are the topology renderer's (the ones the roles write), plus `compose.tune.yaml`: labels
that tie every container to its sweep and candidate (so a leftover from a killed run is found and
removed), the simulator's pace on the simulated node, and the MoE config cache mounted read-only as
SGLANG_MOE_CONFIG_DIR. Each candidate gets its own compose project (`sglang-tune-<sweep>-<id>`).

Fairness between candidates: every candidate is a fresh set of containers (nothing warm from the last
one but the JIT kernel cache, which holds compiled kernels, not results); the ports must be free
before `up` (a leftover listener would be benchmarked instead); the prefix cache is flushed before
each bench stage (the bench reuses its prompt pool across stages); after `down` no container of the
project may remain and the ports must be free again.
"""

from __future__ import annotations

import io
import json
import socket
import subprocess
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from sglnode.bench.session import BenchConfig, run_session
from sglnode.readiness.logwatch import compose_follower
from sglnode.readiness.waiter import WaitOptions, wait_for_server
from sglnode.topology.model import Topology
from sglnode.topology.render import MOE_CONFIG_MOUNT, RenderOptions, config_dir, project_name, render
from sglnode.tune.spec import SweepSpec

LABEL_SWEEP = "io.sglnode.tune.sweep"
LABEL_CANDIDATE = "io.sglnode.tune.candidate"
COMPOSE_TIMEOUT_S = 300
FLUSH_TIMEOUT_S = 30
# How long `down` may take to free the ports before the sweep calls it a leak.
PORT_RELEASE_S = 15.0
PORT_POLL_S = 0.25
# SGLang drains and frees NCCL communicators on SIGTERM (render.STOP_GRACE_PERIOD_S is 120 s); the
# simulator stops at once.
REAL_STOP_GRACE_S = 60
SIM_STOP_GRACE_S = 2


class DeployError(RuntimeError):
    """Compose failed, or the node is not clean enough to run a candidate fairly."""


@dataclass
class Deployment:
    candidate_id: str
    topology: Topology
    directory: Path
    compose_files: list[str]
    project: str
    server_urls: dict[str, str]
    router_url: str
    ports: list[int]
    log: list[str] = field(default_factory=list)


def _port_open(host: str, port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.2)
        return sock.connect_ex((host, port)) == 0


def topology_ports(topology: Topology) -> list[int]:
    ports = [topology.router.port, topology.router.prometheus_port]
    for server in topology.servers:
        ports.append(server.port)
        if server.bootstrap_port is not None and server.role == "prefill":
            ports.append(server.bootstrap_port)
    return sorted(set(ports))


def tune_override(spec: SweepSpec, topology: Topology, candidate_id: str, moe_dir: Path | None) -> str:
    """compose.tune.yaml: labels on every service, the sim's pace, the MoE config mount."""
    services: dict[str, Any] = {}
    labels = {LABEL_SWEEP: spec.name, LABEL_CANDIDATE: candidate_id}
    for server in topology.servers:
        service: dict[str, Any] = {"labels": labels}
        environment: dict[str, str] = {}
        if spec.runtime == "sim":
            environment["SGLNODE_SIM_TIME_SCALE"] = f"{spec.sim.time_scale:g}"
            environment["SGLNODE_SIM_STARTUP_S"] = f"{spec.sim.startup_s:g}"
        if moe_dir is not None:
            # SGLANG_MOE_CONFIG_DIR replaces the whole root: the cache carries the wheel's configs too.
            environment["SGLANG_MOE_CONFIG_DIR"] = MOE_CONFIG_MOUNT
            service["volumes"] = [f"{moe_dir}:{MOE_CONFIG_MOUNT}:ro"]
        if environment:
            service["environment"] = environment
        services[server.name] = service
    services["router"] = {"labels": labels}
    header = (
        f"# sglnode tune: sweep {spec.name}, candidate {candidate_id}. Labels find leftovers; "
        "the sim's pace; the MoE config cache.\n"
    )
    return header + yaml.safe_dump({"services": services}, sort_keys=False)


class ComposeDeployer:
    """Brings candidates up and down with docker compose on this machine."""

    def __init__(self, spec: SweepSpec, work_dir: Path, moe_dir: Path | None = None) -> None:
        self.spec = spec
        self.work_dir = work_dir
        self.moe_dir = moe_dir
        self.options = RenderOptions(
            runtime=spec.runtime,
            bind_address=spec.bind_address,
            **{
                key: value
                for key, value in (
                    ("sglang_image", spec.images.sglang),
                    ("router_image", spec.images.router),
                    ("sim_image", spec.images.sim),
                )
                if value
            },
        )

    # --- compose ---------------------------------------------------------------------------------
    def _compose(self, deployment: Deployment, *args: str, timeout: float = COMPOSE_TIMEOUT_S) -> str:
        argv = ["docker", "compose", "--project-name", deployment.project]
        argv += [a for f in deployment.compose_files for a in ("-f", f)]
        result = subprocess.run(
            [*argv, *args],
            cwd=deployment.directory,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        deployment.log.append(f"$ {' '.join(argv[2:] + list(args))} -> {result.returncode}")
        if result.returncode != 0:
            raise DeployError(f"docker compose {args[0]} failed: {result.stderr.strip()[-1500:]}")
        return result.stdout

    def prepare(self, candidate_id: str, topology: Topology) -> Deployment:
        root = self.work_dir / candidate_id / "node"
        for item in render(topology, self.options):
            path = root / item.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(item.content, encoding="utf-8")
        directory = root / config_dir(topology)
        (directory / "compose.tune.yaml").write_text(
            tune_override(self.spec, topology, candidate_id, self.moe_dir), encoding="utf-8"
        )
        files = ["compose.yaml"] + (["compose.sim.yaml"] if self.spec.runtime == "sim" else [])
        host = self.spec.bind_address
        return Deployment(
            candidate_id=candidate_id,
            topology=topology,
            directory=directory,
            compose_files=[*files, "compose.tune.yaml"],
            project=project_name(topology),
            server_urls={s.name: f"http://{host}:{s.port}" for s in topology.servers},
            router_url=f"http://{host}:{topology.router.port}",
            ports=topology_ports(topology),
        )

    def up(self, deployment: Deployment) -> None:
        busy = [p for p in deployment.ports if _port_open(self.spec.bind_address, p)]
        if busy:
            raise DeployError(
                f"ports {busy} on {self.spec.bind_address} are in use before the candidate starts: "
                "something else would be benchmarked"
            )
        self._compose(deployment, "up", "--detach", "--pull", "never", "--remove-orphans")

    def down(self, deployment: Deployment, timeout_s: float) -> list[str]:
        """Stop and remove the project; returns what leaked (containers, ports), empty when clean."""
        grace = SIM_STOP_GRACE_S if self.spec.runtime == "sim" else REAL_STOP_GRACE_S
        grace = int(max(1, min(grace, timeout_s / 2)))
        leaks: list[str] = []
        try:
            self._compose(deployment, "down", "--timeout", str(grace), "--remove-orphans", timeout=timeout_s)
        except (DeployError, subprocess.TimeoutExpired) as exc:
            leaks.append(f"compose down: {exc}")
            self.remove_project(deployment.project)
        left = self._containers(f"com.docker.compose.project={deployment.project}")
        if left:
            leaks.append(f"containers still present: {left}")
        deadline = time.monotonic() + PORT_RELEASE_S
        busy = deployment.ports
        while busy and time.monotonic() < deadline:
            busy = [p for p in busy if _port_open(self.spec.bind_address, p)]
            if busy:
                time.sleep(PORT_POLL_S)
        if busy:
            leaks.append(f"ports still answering after down: {busy}")
        return leaks

    def _containers(self, label: str) -> list[str]:
        result = subprocess.run(
            ["docker", "ps", "-a", "-q", "--filter", f"label={label}"],
            capture_output=True,
            text=True,
            timeout=COMPOSE_TIMEOUT_S,
            check=False,
        )
        return result.stdout.split()

    def remove_project(self, project: str) -> None:
        containers = self._containers(f"com.docker.compose.project={project}")
        if containers:
            subprocess.run(
                ["docker", "rm", "-f", *containers],
                capture_output=True,
                timeout=COMPOSE_TIMEOUT_S,
                check=False,
            )
        subprocess.run(
            ["docker", "network", "rm", f"{project}_default"],
            capture_output=True,
            timeout=COMPOSE_TIMEOUT_S,
            check=False,
        )

    def cleanup_stale(self) -> list[str]:
        """Remove every container a previous (killed) run of this sweep left; returns their projects."""
        result = subprocess.run(
            [
                "docker", "ps", "-a", "--filter", f"label={LABEL_SWEEP}={self.spec.name}",
                "--format", '{{.Label "com.docker.compose.project"}}',
            ],
            capture_output=True, text=True, timeout=COMPOSE_TIMEOUT_S, check=False,
        )  # fmt: skip
        projects = sorted(set(result.stdout.split()))
        for project in projects:
            self.remove_project(project)
        return projects

    # --- readiness ---------------------------------------------------------------------------------
    def wait(self, deployment: Deployment, timeout_s: float) -> dict[str, Any]:
        """Every server, then the router. {"outcome": ready|crashed|timed_out|unreachable, ...}."""
        compose = deployment.directory / "compose.yaml"
        servers = list(deployment.topology.servers)

        def one(server: Any) -> dict[str, Any]:
            options = WaitOptions(
                url=deployment.server_urls[server.name],
                follower=compose_follower(compose, server.name),
                timeout_s=timeout_s,
            )
            return {"server": server.name, **wait_for_server(options).to_json()}

        started = time.monotonic()
        with ThreadPoolExecutor(max_workers=max(len(servers), 1)) as pool:
            waits = list(pool.map(one, servers))
        failed = [w for w in waits if w["outcome"] != "ready"]
        if not failed:
            left = max(1.0, timeout_s - (time.monotonic() - started))
            router = wait_for_server(
                WaitOptions(
                    url=deployment.router_url, follower=None, timeout_s=left, pd=deployment.topology.is_pd
                )
            ).to_json()
            waits.append({"server": "router", **router})
            failed = [waits[-1]] if router["outcome"] != "ready" else []
        first = failed[0] if failed else None
        return {
            "outcome": first["outcome"] if first else "ready",
            "failed_server": first["server"] if first else None,
            "elapsed_s": round(time.monotonic() - started, 2),
            "waits": waits,
        }

    def flush(self, deployment: Deployment) -> list[str]:
        """Empty every server's prefix cache (SGLang's /flush_cache); returns the failures."""
        failures = []
        for name, url in deployment.server_urls.items():
            request = urllib.request.Request(f"{url}/flush_cache", method="POST", data=b"")
            try:
                with urllib.request.urlopen(request, timeout=FLUSH_TIMEOUT_S) as response:
                    response.read()
            except (urllib.error.URLError, OSError) as exc:
                failures.append(f"{name}: {exc}")
        return failures

    # --- bench -------------------------------------------------------------------------------------
    def bench(
        self, deployment: Deployment, concurrency: int, duration_s: float, json_path: Path
    ) -> dict[str, Any]:
        """One bench stage through the router; the bench's own report (its `stages` hold one)."""
        bench = self.spec.bench
        topology = deployment.topology
        config = BenchConfig(
            url=deployment.router_url,
            api=bench.api,
            model=topology.model.served_name or topology.model.path,
            concurrency=str(concurrency),
            num_requests=bench.num_requests,
            duration_s=duration_s,
            input_len=bench.input_len,
            output_len=bench.output_len,
            warmup=bench.warmup,
            request_timeout_s=max(duration_s * 2, 30.0),
            progress=False,
            json_path=json_path,
        )
        code, report = run_session(config, stdout=io.StringIO())
        report = json.loads(json.dumps(report, default=str))
        report["exit_code"] = code
        return report
