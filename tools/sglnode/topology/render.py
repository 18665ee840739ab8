"""Render a validated topology into every file the roles write, as data -> text.

The roles write exactly what `render()` returns (through the sglnode_topology filter plugin), so
`sglnode topology render` and a rollout agree byte for byte. Paths are relative to the node's root
(`node_prefix` on the simulated node, `/` on a real one).
"""

from __future__ import annotations

import ipaddress
import re
import textwrap
import urllib.parse
from dataclasses import dataclass
from typing import Any

import yaml

from sglnode.pins import PINS
from sglnode.topology.flags import load_nccl_defaults, normalize_flag
from sglnode.topology.model import Server, Topology

# Images (tools/sglnode/pins.yaml): SGLang from the sglang_image role (name:version tuple), the router
# from images/router (the pinned sglang-router on PyPI), the simulator from images/sim.
DEFAULT_SGLANG_IMAGE = PINS.sglang_image
DEFAULT_ROUTER_IMAGE = PINS.router_image
DEFAULT_SIM_IMAGE = PINS.sim_image
DEFAULT_DOCKER_BIN = "/usr/bin/docker"
# Safe default: loopback. Anything wider must come from the inventory (node_bind_address).
DEFAULT_BIND_ADDRESS = "127.0.0.1"
# A 146 GB checkpoint read from NVMe at ~1-2 GB/s, then DeepGEMM/FlashInfer JIT and CUDA-graph
# capture: 10-25 minutes in the field. 30 minutes matches sglang-router's own
# --worker-startup-timeout-secs default (1800 s), so neither gives up before the other.
HEALTH_START_PERIOD_S = 1800
HEALTH_INTERVAL_S = 30
HEALTH_TIMEOUT_S = 10
HEALTH_RETRIES = 3
SIM_HEALTH_INTERVAL_S = 2
SIM_HEALTH_START_PERIOD_S = 120
# SGLang drains requests and frees NCCL communicators on SIGTERM; give it time before SIGKILL.
STOP_GRACE_PERIOD_S = 120
# Stopping compose waits for every container's grace period; units allow that plus margin.
UNIT_STOP_TIMEOUT_S = STOP_GRACE_PERIOD_S + 60
# `up --detach` returns once containers are created; pulling is disabled, so this is short.
UNIT_START_TIMEOUT_S = 300
# A server that dies at startup is restarted this many times by Docker, then left stopped: a crash at
# startup repeats (OOM, a missing kernel), and every retry reloads the checkpoint (146 GB: minutes of
# disk and PCIe). The rollout check diagnoses the first crash from the log; `docker compose ps -a`
# shows the container exited with its restart count.
DEFAULT_RESTART_RETRIES = 2
MAX_RESTART_RETRIES = 10
# The unit itself (`compose up --detach`) is retried on failure at most UNIT_START_LIMIT_BURST times per
# UNIT_START_LIMIT_INTERVAL_S, UNIT_RESTART_S apart (a boot where dockerd comes up late), then stays
# failed: systemd's start limit, not an endless loop.
UNIT_RESTART_S = 30
UNIT_START_LIMIT_BURST = 3
UNIT_START_LIMIT_INTERVAL_S = 3600
# PyTorch/NCCL shared-memory segments (DataLoader-free inference still uses them for IPC).
SHM_SIZE = "32gb"
# NVIDIA's recommended container limits for PyTorch (NGC containers: --ulimit memlock=-1
# --ulimit stack=67108864): pinned host buffers for NIXL/UCX and NCCL need unlimited memlock.
MEMLOCK_UNLIMITED = -1
STACK_BYTES = 67108864
# The image's JIT caches (Triton, flashinfer JIT, torch inductor and extensions, CuTe DSL) all live
# below SGLNODE_JIT_CACHE (images/sglang/Dockerfile); a named volume keeps them across restarts, so
# only the first start of an image compiles. One volume per image: torch extensions are cached by
# name only, and a module built against another torch would load and crash.
JIT_CACHE_PATH = "/var/cache/sglang-jit"
JIT_CACHE_VOLUME_KEY = "sglang-jit"
# Fused-MoE Triton configs tuned on this node (tools/gpu/tune-node.sh, docs/tune.md): a cache root
# mounted read-only where SGLANG_MOE_CONFIG_DIR points (it replaces the wheel's root, so the cache
# carries the wheel's shipped configs too).
MOE_CONFIG_MOUNT = "/opt/sglnode/moe-configs"
# Inside the container, the HTTP server listens on all container interfaces; what the node exposes
# is decided by the published port's host address (the inventory's bind address).
CONTAINER_LISTEN_ADDRESS = "0.0.0.0"
API_KEY_CONFIG = "api-key.yaml"
API_KEY_ENV = "api-key.env"
API_KEY_CONTAINER_PATH = "/run/sglang/api-key.yaml"
RUNTIMES = ("real", "sim")
CONTROL_CHARACTERS = re.compile(r"[\x00-\x1f\x7f]")
MANAGED_HEADER = "Managed by sglnode from topology {name}; do not edit: change the topology and re-run."
ENV_COMMENT_WIDTH = 98


@dataclass(frozen=True)
class RenderOptions:
    runtime: str = "real"  # real | sim: the unit adds compose.sim.yaml for "sim"
    node: str | None = None  # which node's files (multi-node); default: the first node
    bind_address: str = DEFAULT_BIND_ADDRESS
    prefix: str = ""  # node_prefix: absolute paths in units point under it
    p2p_safe: bool = True  # gpu_node.p2p_safe from preflight
    p2p_level: str = ""  # NCCL_P2P_LEVEL preflight read from the PCIe topology; "" = NCCL's own choice
    infiniband: bool = False
    api_key: bool = False  # an API key secret exists (written by the role, never rendered)
    sglang_image: str = DEFAULT_SGLANG_IMAGE
    router_image: str = DEFAULT_ROUTER_IMAGE
    sim_image: str = DEFAULT_SIM_IMAGE
    docker_bin: str = DEFAULT_DOCKER_BIN
    gpu_preset: str = PINS.gpu.preset
    moe_config_dir: str = ""  # host path of a tuned MoE config cache root; "" = the wheel's configs
    # Docker restarts of a server that exits with an error (compose `restart: on-failure:N`); 0 = none.
    restart_retries: int = DEFAULT_RESTART_RETRIES

    def __post_init__(self) -> None:
        """Refuse options that would break the files they land in (a unit line, a compose port)."""
        if self.runtime not in RUNTIMES:
            raise ValueError(f"runtime {self.runtime!r} is not one of {', '.join(RUNTIMES)}")
        if self.moe_config_dir and not self.moe_config_dir.startswith("/"):
            raise ValueError(f"moe_config_dir {self.moe_config_dir!r} must be an absolute host path")
        for name in (
            "prefix",
            "docker_bin",
            "bind_address",
            "sglang_image",
            "router_image",
            "sim_image",
            "moe_config_dir",
        ):
            value = getattr(self, name)
            if not isinstance(value, str) or CONTROL_CHARACTERS.search(value):
                raise ValueError(f"{name} {value!r} must be text without control characters (newline, tab)")
        levels = load_nccl_defaults()["p2p_level"]["levels"]
        if self.p2p_level and self.p2p_level not in levels:
            raise ValueError(
                f"p2p_level {self.p2p_level!r} is not one of {', '.join(levels)} (NCCL_P2P_LEVEL)"
            )
        if self.prefix and not self.prefix.startswith("/"):
            raise ValueError(f"prefix {self.prefix!r} must be an absolute path (or empty for /)")
        retries = self.restart_retries
        in_range = isinstance(retries, int) and 0 <= retries <= MAX_RESTART_RETRIES
        if isinstance(retries, bool) or not in_range:
            raise ValueError(
                f"restart_retries {retries!r} must be a whole number from 0 to {MAX_RESTART_RETRIES}: "
                "a server that crashes at startup must not reload its model in a loop"
            )
        if not self.docker_bin.startswith("/"):
            raise ValueError(f"docker_bin {self.docker_bin!r} must be an absolute path")
        try:
            ipaddress.ip_address(self.bind_address)
        except ValueError as exc:
            raise ValueError(f"bind_address {self.bind_address!r} is not an IP address") from exc


@dataclass(frozen=True)
class RenderedFile:
    path: str  # relative to the node root, e.g. etc/sglang/pd-1p1d/compose.yaml
    content: str
    mode: str  # octal string, as Ansible's copy module takes it
    kind: str  # nccl_env | compose | unit: which role writes it

    def to_json(self) -> dict[str, str]:
        return {"path": self.path, "content": self.content, "mode": self.mode, "kind": self.kind}


def config_dir(topology: Topology) -> str:
    return f"etc/sglang/{topology.name}"


def project_name(topology: Topology) -> str:
    return f"sglang-{topology.name}"


def unit_name(topology: Topology) -> str:
    return f"sglang-{topology.name}.service"


def render(topology: Topology, options: RenderOptions | None = None) -> list[RenderedFile]:
    """Every file for one node of a validated topology, in a stable order."""
    opts = options or RenderOptions()
    node = opts.node or topology.nodes[0].name
    local = [s for s in topology.servers if node in s.nodes]
    base = config_dir(topology)
    files = [
        RenderedFile(f"{base}/{s.name}.env", render_env_file(topology, s, opts), "0640", "nccl_env")
        for s in local
    ]
    files.append(
        RenderedFile(f"{base}/compose.yaml", render_compose(topology, node, opts), "0644", "compose")
    )
    files.append(
        RenderedFile(f"{base}/compose.sim.yaml", render_compose_sim(topology, node, opts), "0644", "compose")
    )
    files.append(
        RenderedFile(f"etc/systemd/system/{unit_name(topology)}", render_unit(topology, opts), "0644", "unit")
    )
    return files


# --- NCCL env files ---------------------------------------------------------------------------------
def _entry(spec: dict[str, Any]) -> tuple[str, str]:
    return str(spec["value"]), _one_line(spec["why"])


def nccl_profile(topology: Topology, server: Server) -> str | None:
    """The server's NCCL profile: its own, else the topology's, else none (NCCL's own choices)."""
    return server.nccl_profile or topology.nccl_profile


def ucx_transports(topology: Topology, server: Server, opts: RenderOptions) -> list[str]:
    """UCX_TLS of a PD server whose KV moves over NIXL (empty for others)."""
    data = load_nccl_defaults()
    spec = data["kv_transfer"].get(str(server.transfer_backend))
    if server.role == "regular" or spec is None:
        return []
    transports = list(spec["ucx_transports"])
    if opts.infiniband:
        transports += data["infiniband"]["ucx_transports"]
    if not opts.p2p_safe:
        transports = [t for t in transports if t not in spec["p2p_off_remove"]]
    return transports


def nccl_environment(topology: Topology, server: Server, opts: RenderOptions) -> list[tuple[str, str, str]]:
    """(name, value, why) for one server: defaults, profile, preflight's P2P level, P2P-off and IB
    adjustments, KV transfer transports, then the topology's and server's overrides."""
    data = load_nccl_defaults()
    entries: dict[str, tuple[str, str]] = {k: _entry(v) for k, v in data["defaults"].items()}
    profile = nccl_profile(topology, server)
    if profile:
        entries.update({k: _entry(v) for k, v in data["profiles"][profile]["env"].items()})
    if opts.p2p_level:
        entries["NCCL_P2P_LEVEL"] = (opts.p2p_level, _one_line(data["p2p_level"]["why"]))
    if opts.infiniband:
        for name in data["infiniband"]["remove"]:
            entries.pop(name, None)
    if not opts.p2p_safe:
        for name in data["p2p_off"]["remove"]:
            entries.pop(name, None)
        for name, spec in data["p2p_off"]["env"].items():
            entries[name] = _entry(spec)
    transports = ucx_transports(topology, server, opts)
    if transports:
        why = data["kv_transfer"][str(server.transfer_backend)]["why"]
        entries["UCX_TLS"] = (",".join(transports), _one_line(why))
    for source, overrides in (("topology", topology.nccl), (f"server {server.name}", server.nccl)):
        for name, value in overrides.items():
            default = entries.get(name)
            why = f"Set by the {source} (nccl:)" + (
                f"; the default here is {default[0]}." if default else "."
            )
            entries[name] = (value, why)
    for name, value in server.env.items():
        entries[name] = (value, f"Set by server {server.name} (env:).")
    return [(name, value, why) for name, (value, why) in entries.items()]


def render_env_file(topology: Topology, server: Server, opts: RenderOptions) -> str:
    lines = [
        f"# {MANAGED_HEADER.format(name=topology.name)}",
        f"# Environment of SGLang server {server.name} ({server.role}, GPUs {list(server.gpus)}).",
        "# Order: defaults (sglnode/topology/nccl.yaml), nccl_profile, preflight's P2P level, KV transfer,",
        "# topology nccl:, server nccl:, server env:.",
    ]
    for name, value, why in nccl_environment(topology, server, opts):
        lines.append("")
        lines.extend(f"# {line}" for line in textwrap.wrap(why, ENV_COMMENT_WIDTH))
        lines.append(f"{name}={value}")
    return "\n".join(lines) + "\n"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


# --- SGLang and router command lines ------------------------------------------------------------------
def sglang_command(topology: Topology, server: Server, node: str, opts: RenderOptions) -> list[str]:
    """The argv of `python3 -m sglang.launch_server` for this server's rank on `node`."""
    model = topology.model
    argv = ["python3", "-m", "sglang.launch_server", "--model-path", model.path]
    argv += _opt("--served-model-name", model.served_name)
    argv += _opt("--quantization", model.quantization)
    argv += ["--tp-size", str(server.tp)]
    argv += _opt("--dp-size", server.dp if server.dp > 1 else None)
    argv += _opt("--ep-size", server.ep)
    argv += ["--host", _listen_address(topology, opts), "--port", str(server.port)]
    if server.role != "regular":
        argv += ["--disaggregation-mode", server.role]
        argv += _opt("--disaggregation-transfer-backend", server.transfer_backend)
    if server.role == "prefill":
        argv += _opt("--disaggregation-bootstrap-port", server.bootstrap_port)
    argv += _opt("--mem-fraction-static", server.mem_fraction_static)
    argv += _opt("--attention-backend", server.attention_backend)
    argv += _opt("--kv-cache-dtype", server.kv_cache_dtype)
    argv += _opt("--context-length", server.context_length)
    argv += _opt("--chunked-prefill-size", server.chunked_prefill_size)
    argv += _opt("--cuda-graph-max-bs-decode", server.cuda_graph_max_bs_decode)
    argv += _opt("--num-continuous-decode-steps", server.num_continuous_decode_steps)
    spec = server.speculative
    if spec is not None:
        argv += _opt("--speculative-algorithm", spec.algorithm)
        argv += _opt("--speculative-draft-model-path", spec.draft_model_path)
        argv += _opt("--speculative-num-steps", spec.num_steps)
        argv += _opt("--speculative-eagle-topk", spec.eagle_topk)
        argv += _opt("--speculative-num-draft-tokens", spec.num_draft_tokens)
    if server.spans_nodes:
        head = topology.node(server.head_node)
        address = head.address if head and head.address else opts.bind_address
        argv += ["--dist-init-addr", f"{address}:{server.dist_init_port}"]
        argv += ["--nnodes", str(len(server.nodes)), "--node-rank", str(server.nodes.index(node))]
    if sees_every_gpu(topology, server):
        # The container sees every GPU of the node (CUDA IPC to the other PD side); SGLang puts TP
        # rank r on GPU base + r * step (srt/entrypoints/engine.py:935-939).
        base, step = gpu_progression(server.gpus) or (0, 1)
        argv += ["--base-gpu-id", str(base), "--gpu-id-step", str(step)]
    if not opts.p2p_safe:
        argv += load_nccl_defaults()["p2p_off"]["sglang_flags"]
    if opts.api_key:
        argv += ["--config", API_KEY_CONTAINER_PATH]
    argv += args_to_argv(server.args, exclude=set(argv))
    return argv


def sees_every_gpu(topology: Topology, server: Server) -> bool:
    """PD servers' containers see all of the node's GPUs, so UCX can reach the other side by CUDA IPC.

    A container that sees only its own GPUs cannot open a CUDA IPC handle of memory on a GPU it does
    not see, and NIXL/UCX then stages every KV page through host memory (docs/pd.md).
    """
    return server.role in ("prefill", "decode")


def gpu_progression(gpus: tuple[int, ...]) -> tuple[int, int] | None:
    """(base, step) when the GPU list is base, base + step, ... (what --base-gpu-id/--gpu-id-step say)."""
    if not gpus:
        return None
    step = gpus[1] - gpus[0] if len(gpus) > 1 else 1
    if step < 1 or any(gpu != gpus[0] + index * step for index, gpu in enumerate(gpus)):
        return None
    return gpus[0], step


def args_to_argv(args: dict[str, Any], exclude: set[str] | None = None) -> list[str]:
    """Extra flags, sorted for stable output: true -> bare switch, false/None -> left out, list -> values."""
    argv: list[str] = []
    for key in sorted(args, key=lambda k: normalize_flag(str(k))):
        flag, value = normalize_flag(str(key)), args[key]
        if value is False or value is None or (exclude and value is True and flag in exclude):
            continue
        argv.append(flag)
        if value is not True:
            argv += [str(v) for v in value] if isinstance(value, list) else [_scalar(value)]
    return argv


def _scalar(value: Any) -> str:
    return str(value)


def _opt(flag: str, value: Any) -> list[str]:
    return [] if value is None else [flag, str(value)]


def _listen_address(topology: Topology, opts: RenderOptions) -> str:
    return opts.bind_address if topology.network == "host" else CONTAINER_LISTEN_ADDRESS


def _worker_url(topology: Topology, server: Server, opts: RenderOptions) -> str:
    if topology.network == "host":
        head = topology.node(server.head_node)
        host = head.address if head and head.address else opts.bind_address
    else:
        host = server.name  # compose service name on the project network
    return f"http://{host}:{server.port}"


def router_command(topology: Topology, opts: RenderOptions) -> list[str]:
    """The argv of the real (pinned) sglang-router: PD mode for PD topologies, worker URLs otherwise."""
    router = topology.router
    listen = _listen_address(topology, opts)
    argv = ["python3", "-m", "sglang_router.launch_router", "--host", listen, "--port", str(router.port)]
    if topology.is_pd:
        argv.append("--pd-disaggregation")
        for server in topology.servers:
            if server.role == "prefill":
                argv += ["--prefill", _worker_url(topology, server, opts), str(server.bootstrap_port)]
        for server in topology.servers:
            if server.role == "decode":
                argv += ["--decode", _worker_url(topology, server, opts)]
    else:
        argv += ["--worker-urls", *(_worker_url(topology, s, opts) for s in topology.servers)]
    argv += ["--policy", router.policy]
    argv += ["--prometheus-host", listen, "--prometheus-port", str(router.prometheus_port)]
    argv += args_to_argv(router.args)
    return argv


# --- compose ------------------------------------------------------------------------------------------
def _healthcheck(host: str, port: int) -> dict[str, Any]:
    # python3 is in every image here (SGLang, router, simulator); curl is not guaranteed.
    url = f"http://{host}:{port}/health"
    probe = f"import urllib.request; urllib.request.urlopen('{url}', timeout={HEALTH_TIMEOUT_S})"
    return {
        "test": ["CMD", "python3", "-c", probe],
        "interval": f"{HEALTH_INTERVAL_S}s",
        "timeout": f"{HEALTH_TIMEOUT_S}s",
        "retries": HEALTH_RETRIES,
        "start_period": f"{HEALTH_START_PERIOD_S}s",
    }


def jit_cache_volume(image: str) -> str:
    """Docker volume name of one image's JIT cache (volume names allow [a-zA-Z0-9_.-])."""
    return "sglang-jit-" + re.sub(r"[^a-zA-Z0-9_.-]+", "-", image).strip("-.")


def _health_host(topology: Topology, opts: RenderOptions) -> str:
    return opts.bind_address if topology.network == "host" else "127.0.0.1"


def _published(topology: Topology, opts: RenderOptions, *ports: int) -> dict[str, Any]:
    if topology.network == "host":
        return {"network_mode": "host"}
    return {"ports": [f"{opts.bind_address}:{p}:{p}" for p in ports]}


def _server_service(topology: Topology, server: Server, node: str, opts: RenderOptions) -> dict[str, Any]:
    model = topology.model
    is_head = node == server.head_node
    service: dict[str, Any] = {
        "image": opts.sglang_image,
        "command": sglang_command(topology, server, node, opts),
        "init": True,
        "ipc": "host",
        "shm_size": SHM_SIZE,
        "ulimits": {"memlock": {"soft": MEMLOCK_UNLIMITED, "hard": MEMLOCK_UNLIMITED}, "stack": STACK_BYTES},
        "env_file": [f"./{server.name}.env"],
        "volumes": [f"{model.host_path}:{model.path}:ro", f"{JIT_CACHE_VOLUME_KEY}:{JIT_CACHE_PATH}"],
    }
    if opts.api_key:
        service["volumes"].append(f"./{API_KEY_CONFIG}:{API_KEY_CONTAINER_PATH}:ro")
    if opts.moe_config_dir:
        service["volumes"].append(f"{opts.moe_config_dir}:{MOE_CONFIG_MOUNT}:ro")
        service["environment"] = {"SGLANG_MOE_CONFIG_DIR": MOE_CONFIG_MOUNT}
    if is_head:
        service.update(_published(topology, opts, server.port))
        service["healthcheck"] = _healthcheck(_health_host(topology, opts), server.port)
    elif topology.network == "host":
        service["network_mode"] = "host"
    node_gpus = topology.node(node).gpus if topology.node(node) else max(server.gpus, default=0) + 1
    visible = range(node_gpus) if sees_every_gpu(topology, server) else server.gpus
    service["deploy"] = {
        "resources": {
            "reservations": {
                "devices": [
                    {"driver": "nvidia", "device_ids": [str(g) for g in visible], "capabilities": ["gpu"]}
                ]
            }
        }
    }
    # Bounded: a crash at startup is retried restart_retries times, then the server stays down (and the
    # rollout check says why) instead of reloading its checkpoint forever.
    service["restart"] = f"on-failure:{opts.restart_retries}" if opts.restart_retries else "no"
    service["stop_grace_period"] = f"{STOP_GRACE_PERIOD_S}s"
    return service


def _router_service(topology: Topology, node: str, opts: RenderOptions) -> dict[str, Any]:
    router = topology.router
    command = router_command(topology, opts)
    service: dict[str, Any] = {"image": opts.router_image, "init": True}
    if opts.api_key:
        # The router has no config file; the key reaches its argv from a 0600 env file, not from compose.
        service["entrypoint"] = ["/bin/sh", "-c", 'exec "$$@" --api-key "$$SGLANG_API_KEY"', "router"]
        service["env_file"] = [f"./{API_KEY_ENV}"]
    service["command"] = command
    service.update(_published(topology, opts, router.port, router.prometheus_port))
    service["healthcheck"] = _healthcheck(_health_host(topology, opts), router.port)
    local = [s.name for s in topology.servers if node in s.nodes and node == s.head_node]
    if local:
        service["depends_on"] = {name: {"condition": "service_started"} for name in local}
    # The router loads no model: a restart costs a second, and it may exit while its workers still
    # load (its worker startup timeout), so it is restarted until stopped.
    service["restart"] = "unless-stopped"
    return service


def _header(topology: Topology, what: str) -> str:
    return f"# {MANAGED_HEADER.format(name=topology.name)}\n# {what}\n"


def render_compose(topology: Topology, node: str, opts: RenderOptions) -> str:
    services = {s.name: _server_service(topology, s, node, opts) for s in topology.servers if node in s.nodes}
    if topology.router.node == node:
        services["router"] = _router_service(topology, node, opts)
    document: dict[str, Any] = {"name": project_name(topology), "services": services}
    if any(server.name in services for server in topology.servers):
        # A fixed name (not project-scoped): every topology running this image shares its compiled kernels.
        document["volumes"] = {JIT_CACHE_VOLUME_KEY: {"name": jit_cache_volume(opts.sglang_image)}}
    what = f"SGLang servers and router on node {node}; image tags pin SGLang and the router."
    return _header(topology, what) + yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=120)


class _Reset:
    """Compose's `!reset` tag: drop what the base file set (docs.docker.com/reference/compose-file/merge)."""

    def __init__(self, value: Any) -> None:
        self.value = value


class _Dumper(yaml.SafeDumper):
    pass


def _represent_reset(dumper: yaml.SafeDumper, data: _Reset) -> yaml.Node:
    if isinstance(data.value, dict):
        return dumper.represent_mapping("!reset", data.value)
    if isinstance(data.value, list):
        return dumper.represent_sequence("!reset", data.value)
    return dumper.represent_scalar("!reset", "")


_Dumper.add_representer(_Reset, _represent_reset)


def _sim_environment(topology: Topology, opts: RenderOptions) -> dict[str, str]:
    environment = {"SGLNODE_SIM_GPU": opts.gpu_preset}
    if topology.model.preset:
        environment["SGLNODE_SIM_MODEL"] = topology.model.preset
    if topology.model.weights_gb is not None:
        environment["SGLNODE_SIM_WEIGHTS_GB"] = str(topology.model.weights_gb)
    return environment


def render_compose_sim(topology: Topology, node: str, opts: RenderOptions) -> str:
    """Override for the simulated node: the simulator (a test double of SGLang) on the same flags."""
    services: dict[str, Any] = {}
    for server in topology.servers:
        if node not in server.nodes:
            continue
        services[server.name] = {
            "image": opts.sim_image,
            # `sglnode sim` strips the leading `python3 -m sglang.launch_server` of the same command.
            "entrypoint": ["sglnode", "sim"],
            # Sim-only knobs (tools/sglnode/sim/config.py); role, TP and ports come from the flags.
            "environment": _sim_environment(topology, opts),
            "deploy": _Reset({}),
            "volumes": _Reset([]),
            # The simulator pins no host memory; raising memlock needs a privilege the sim host's
            # Docker may lack ("error setting rlimit type 8: operation not permitted").
            "ulimits": _Reset({}),
            # The host IPC namespace is for NCCL's shared memory between TP ranks; the simulator has
            # none, so it keeps a private one (and the default /dev/shm).
            "ipc": _Reset(None),
            "shm_size": _Reset(None),
        }
        if server.head_node == node:
            # The simulator is ready in seconds: probe often so the demo does not wait 30 s per step.
            services[server.name]["healthcheck"] = {
                "interval": f"{SIM_HEALTH_INTERVAL_S}s",
                "start_period": f"{SIM_HEALTH_START_PERIOD_S}s",
            }
    what = "Simulated runtime: the simulator image, not SGLang; no GPUs, model volume, memlock or host IPC."
    document = {"services": services}
    return _header(topology, what) + yaml.dump(document, Dumper=_Dumper, sort_keys=False, width=120)


# --- systemd ------------------------------------------------------------------------------------------
def compose_files(opts: RenderOptions) -> list[str]:
    return ["compose.yaml", "compose.sim.yaml"] if opts.runtime == "sim" else ["compose.yaml"]


def _unit_specifiers(text: str) -> str:
    """systemd expands %-specifiers in most settings (systemd.unit(5) "Specifiers"): %% is a literal %."""
    return text.replace("%", "%%")


def _unit_exec_arg(arg: str) -> str:
    """One ExecStart= argument: $ and % escaped, quoted when it holds spaces (systemd.service(5))."""
    text = _unit_specifiers(arg).replace("$", "$$")
    if re.search(r"[\s\"'\\;]", text):
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return text


def _unit_uri(path: str) -> str:
    """Documentation= is a space-separated list of URIs: the path percent-encoded, then % escaped."""
    return _unit_specifiers("file://" + urllib.parse.quote(path))


def render_unit(topology: Topology, opts: RenderOptions) -> str:
    directory = f"{opts.prefix.rstrip('/')}/{config_dir(topology)}"
    compose = " ".join(
        _unit_exec_arg(arg)
        for arg in [opts.docker_bin, "compose", "--project-name", project_name(topology)]
        + [arg for f in compose_files(opts) for arg in ("--file", f)]
    )
    return textwrap.dedent(
        f"""\
        # {MANAGED_HEADER.format(name=topology.name)}
        # Starts the topology's compose project at boot and stops it on shutdown or when another
        # topology takes the GPUs (the sglang_serve role stops the other sglang-*.service first).
        [Unit]
        Description=SGLang topology {topology.name} (compose project {project_name(topology)})
        Documentation={_unit_uri(f"{directory}/compose.yaml")}
        Requires=docker.service
        After=docker.service network-online.target
        Wants=network-online.target
        # A failing start is retried, then the unit stays failed (systemd's start limit).
        StartLimitIntervalSec={UNIT_START_LIMIT_INTERVAL_S}
        StartLimitBurst={UNIT_START_LIMIT_BURST}

        [Service]
        Type=oneshot
        RemainAfterExit=yes
        WorkingDirectory={_unit_specifiers(directory)}
        ExecStart={compose} up --detach --remove-orphans --pull never
        ExecStop={compose} down
        Restart=on-failure
        RestartSec={UNIT_RESTART_S}
        TimeoutStartSec={UNIT_START_TIMEOUT_S}
        TimeoutStopSec={UNIT_STOP_TIMEOUT_S}

        [Install]
        WantedBy=multi-user.target
        """
    )
