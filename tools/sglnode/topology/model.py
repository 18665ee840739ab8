"""Load a topology file and normalize it: every field the validator and renderer read gets a value.

The file is read by the bounded, safe loader (safeyaml.py) and each part validated by its declared
schema (schema.py: unknown keys refused with the nearest known one, strict types, finite numbers).
A field that fails is reported and left at its default, so one pass reports everything; normalizing
never rejects anything on meaning (check.py does that, naming server and field).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglnode.pins import PINS
from sglnode.topology.problem import Problem
from sglnode.topology.safeyaml import MAX_TOPOLOGY_BYTES, InputFileError, load_yaml_file
from sglnode.topology.schema import (
    ModelDoc,
    NodeDoc,
    RouterDoc,
    ServerDoc,
    SpeculativeDoc,
    TopologyDoc,
    short,
    validate_partial,
)

# The pinned SGLang's defaults (sglang/srt/arg_groups/fields/serving.py `port`, fields/disagg.py
# `disaggregation_bootstrap_port`) and the pinned router's (`python -m sglang_router.launch_router
# --help`: its port and Prometheus port), from tools/sglnode/pins.yaml.
SGLANG_DEFAULT_PORT = PINS.ports.sglang
SGLANG_DEFAULT_BOOTSTRAP_PORT = PINS.ports.bootstrap
ROUTER_DEFAULT_PORT = PINS.ports.router
ROUTER_DEFAULT_PROMETHEUS_PORT = PINS.ports.router_prometheus
ROUTER_DEFAULT_POLICY = "cache_aware"
# Port torch.distributed rendezvous uses for --dist-init-addr when a server spans nodes (any free port).
DEFAULT_DIST_INIT_PORT = 20000
# GPUs on the node this repo targets.
DEFAULT_NODE_GPUS = PINS.gpu.count
LOCAL_NODE = "local"
ROLES = ("regular", "prefill", "decode")
NETWORK_MODES = ("bridge", "host")
MERGED_MAPPINGS = ("args", "nccl", "env")

__all__ = ["Problem"]


@dataclass(frozen=True)
class Node:
    name: str
    address: str | None
    gpus: int


@dataclass(frozen=True)
class Speculative:
    algorithm: str | None
    num_steps: int | None
    eagle_topk: int | None
    num_draft_tokens: int | None
    draft_model_path: str | None


@dataclass(frozen=True)
class Server:
    """One SGLang server: the one model of a server from topology file to planner, simulator and
    renderer (`sglnode plan` builds one from its flags, the simulator from SGLang's own)."""

    name: str
    role: str = "regular"
    nodes: tuple[str, ...] = (LOCAL_NODE,)
    gpus: tuple[int, ...] = ()
    tp: int = 1
    dp: int = 1
    ep: int | None = None
    port: int = SGLANG_DEFAULT_PORT
    bootstrap_port: int | None = None
    dist_init_port: int = DEFAULT_DIST_INIT_PORT
    mem_fraction_static: float | None = None  # None: SGLang's own default
    attention_backend: str | None = None
    kv_cache_dtype: str | None = None
    context_length: int | None = None
    chunked_prefill_size: int | None = None
    cuda_graph_max_bs_decode: int | None = None
    num_continuous_decode_steps: int | None = None
    transfer_backend: str | None = None
    nccl_profile: str | None = None  # None: the topology's (then NCCL's own choices)
    speculative: Speculative | None = None
    nccl: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def spans_nodes(self) -> bool:
        return len(self.nodes) > 1

    @property
    def head_node(self) -> str:
        """The node that runs rank 0: HTTP port, bootstrap port and dist-init rendezvous live there."""
        return self.nodes[0]

    @property
    def gpu_count(self) -> int:
        return len(self.gpus) * len(self.nodes)


@dataclass(frozen=True)
class Router:
    node: str
    port: int
    prometheus_port: int
    policy: str
    args: dict[str, Any]


@dataclass(frozen=True)
class Model:
    path: str
    host_path: str
    served_name: str | None
    quantization: str | None
    preset: str | None
    weights_gb: float | None


@dataclass(frozen=True)
class Topology:
    name: str
    description: str
    model: Model
    nodes: tuple[Node, ...]
    network: str
    servers: tuple[Server, ...]
    router: Router
    nccl: dict[str, str]
    nccl_profile: str | None = None
    source: dict[str, Any] = field(repr=False, compare=False, default_factory=dict)

    @property
    def is_pd(self) -> bool:
        return any(s.role != "regular" for s in self.servers)

    @property
    def node_names(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.nodes)

    def node(self, name: str) -> Node | None:
        return next((n for n in self.nodes if n.name == name), None)


class TopologyFileError(ValueError):
    """The file cannot be read as a YAML mapping at all."""


def read_topology_file(path: str | Path) -> dict[str, Any]:
    """The file as a mapping, through the bounded safe loader (size, aliases, depth, encoding)."""
    try:
        data = load_yaml_file(path, what="topology", max_bytes=MAX_TOPOLOGY_BYTES)
    except InputFileError as exc:
        raise TopologyFileError(str(exc)) from exc
    if not isinstance(data, dict):
        raise TopologyFileError(f"topology {path} is not a YAML mapping (got {type(data).__name__})")
    return data


def _env_value(value: Any) -> str:
    # YAML `true`/`1` in an env mapping means the string NCCL reads, not Python's spelling.
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _env_map(raw: dict[str, Any] | None) -> dict[str, str]:
    return {str(k): _env_value(v) for k, v in (raw or {}).items()}


def _at(prefix: str) -> Callable[[tuple[Any, ...]], str]:
    return lambda path: ".".join([prefix, *(str(p) for p in path)])


def _speculative(doc: SpeculativeDoc | None) -> Speculative | None:
    if doc is None or not doc.model_fields_set:
        return None
    return Speculative(
        algorithm=doc.algorithm.upper() if doc.algorithm else None,
        num_steps=doc.num_steps,
        eagle_topk=doc.eagle_topk,
        num_draft_tokens=doc.num_draft_tokens,
        draft_model_path=doc.draft_model_path,
    )


def _server(
    data: Any, index: int, defaults: dict[str, Any], first_node: str
) -> tuple[Server | None, list[Problem]]:
    if not isinstance(data, dict):
        return None, [Problem(f"servers[{index}]", f"expected a mapping, got {short(data)}")]
    merged = {**defaults, **data}
    # Mappings merge one level deep, so a server can add one flag without restating the defaults.
    for key in MERGED_MAPPINGS:
        if isinstance(defaults.get(key), dict) and isinstance(data.get(key), dict):
            merged[key] = {**defaults[key], **data[key]}
    name = merged.get("name")
    where = f"server {name}" if isinstance(name, str) and name else f"servers[{index}]"
    doc, _, problems = validate_partial(ServerDoc, merged, _at(where))
    if not doc.name:
        problems.append(Problem(where, "every server needs a name"))
    role = doc.role or "regular"
    nodes = doc.nodes if doc.nodes is not None else [doc.node or first_node]
    if isinstance(nodes, str):
        nodes = [nodes]
    if not nodes:
        problems.append(Problem(f"{where}.nodes", "expected a node name or a list of them, got []"))
        nodes = [first_node]
    server = Server(
        name=doc.name or f"server{index}",
        role=role,
        nodes=tuple(nodes),
        gpus=tuple(doc.gpus or ()),
        tp=doc.tp if doc.tp is not None else 1,
        dp=doc.dp if doc.dp is not None else 1,
        ep=doc.ep,
        port=doc.port if doc.port is not None else SGLANG_DEFAULT_PORT,
        bootstrap_port=doc.bootstrap_port
        if doc.bootstrap_port is not None
        else (SGLANG_DEFAULT_BOOTSTRAP_PORT if role == "prefill" else None),
        dist_init_port=doc.dist_init_port if doc.dist_init_port is not None else DEFAULT_DIST_INIT_PORT,
        mem_fraction_static=doc.mem_fraction_static,
        attention_backend=doc.attention_backend,
        kv_cache_dtype=doc.kv_cache_dtype,
        context_length=doc.context_length,
        chunked_prefill_size=doc.chunked_prefill_size,
        cuda_graph_max_bs_decode=doc.cuda_graph_max_bs_decode,
        num_continuous_decode_steps=doc.num_continuous_decode_steps,
        transfer_backend=doc.transfer_backend,
        nccl_profile=doc.nccl_profile,
        speculative=_speculative(doc.speculative),
        nccl=_env_map(doc.nccl),
        env=_env_map(doc.env),
        args=dict(doc.args or {}),
    )
    return server, problems


def _nodes(raw: list[Any] | None, node_gpus: int) -> tuple[tuple[Node, ...], list[Problem]]:
    if not raw:
        return (Node(LOCAL_NODE, None, node_gpus),), []
    nodes: list[Node] = []
    problems: list[Problem] = []
    for index, entry in enumerate(raw):
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str) or not entry["name"]:
            problems.append(Problem(f"nodes[{index}]", f"expected a mapping with a name, got {short(entry)}"))
            continue
        doc, _, found = validate_partial(NodeDoc, entry, _at(f"node {entry['name']}"))
        problems.extend(found)
        nodes.append(Node(name=str(doc.name), address=doc.address, gpus=doc.gpus or node_gpus))
    return tuple(nodes) or (Node(LOCAL_NODE, None, node_gpus),), problems


def _model(raw: dict[str, Any] | None) -> tuple[Model, list[Problem]]:
    doc, _, problems = validate_partial(ModelDoc, raw or {}, _at("model"))
    path = doc.path or ""
    if not path:
        problems.append(Problem("model.path", "the model path inside the container is required"))
    model = Model(
        path=path,
        host_path=doc.host_path or path,
        served_name=doc.served_name,
        quantization=doc.quantization,
        preset=doc.preset,
        weights_gb=doc.weights_gb,
    )
    return model, problems


def load_topology(data: dict[str, Any], node_gpus: int = DEFAULT_NODE_GPUS) -> tuple[Topology, list[Problem]]:
    """Normalize a topology mapping; returns the model and the schema problems found on the way."""
    doc, _, problems = validate_partial(TopologyDoc, data, _at("topology"))
    nodes, found = _nodes(doc.nodes, node_gpus)
    problems.extend(found)
    _, defaults, found = validate_partial(ServerDoc, doc.server_defaults or {}, _at("server_defaults"))
    problems.extend(found)
    servers: list[Server] = []
    for index, raw in enumerate(doc.servers or []):
        server, found = _server(raw, index, defaults, nodes[0].name)
        problems.extend(found)
        if server is not None:
            servers.append(server)
    router_doc, _, found = validate_partial(RouterDoc, doc.router or {}, _at("router"))
    problems.extend(found)
    router = Router(
        node=router_doc.node or nodes[0].name,
        port=router_doc.port if router_doc.port is not None else ROUTER_DEFAULT_PORT,
        prometheus_port=router_doc.prometheus_port
        if router_doc.prometheus_port is not None
        else ROUTER_DEFAULT_PROMETHEUS_PORT,
        policy=router_doc.policy or ROUTER_DEFAULT_POLICY,
        args=dict(router_doc.args or {}),
    )
    model, found = _model(doc.model)
    problems.extend(found)
    topology = Topology(
        name=doc.name or "",
        description=doc.description or "",
        model=model,
        nodes=nodes,
        network=doc.network or "bridge",
        servers=tuple(servers),
        router=router,
        nccl=_env_map(doc.nccl),
        nccl_profile=doc.nccl_profile,
        source=data,
    )
    return topology, problems
