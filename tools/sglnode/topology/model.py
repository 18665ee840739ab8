"""Load a topology file and normalize it: every field the validator and renderer read gets a value.

Normalizing never rejects anything on meaning (check.py does that, naming server and field);
it only records a problem when a field has the wrong type, so one pass reports everything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# SGLang 0.5.23 defaults (sglang/srt/arg_groups/fields/serving.py `port = 30000`,
# fields/disagg.py `disaggregation_bootstrap_port = 8998`); the router also listens on 30000 and
# exports Prometheus on 29000 by default (`python -m sglang_router.launch_router --help`, 0.3.2).
SGLANG_DEFAULT_PORT = 30000
SGLANG_DEFAULT_BOOTSTRAP_PORT = 8998
ROUTER_DEFAULT_PORT = 30000
ROUTER_DEFAULT_PROMETHEUS_PORT = 29000
ROUTER_DEFAULT_POLICY = "cache_aware"
# Port torch.distributed rendezvous uses for --dist-init-addr when a server spans nodes (any free port).
DEFAULT_DIST_INIT_PORT = 20000
# The node this repo targets has 8 GPUs (8x RTX PRO 6000 Blackwell).
DEFAULT_NODE_GPUS = 8
LOCAL_NODE = "local"
ROLES = ("regular", "prefill", "decode")
NETWORK_MODES = ("bridge", "host")
MERGED_MAPPINGS = ("args", "nccl", "env")


@dataclass(frozen=True)
class Problem:
    """One reason a topology is rejected: where (server and field) and what to change."""

    where: str
    message: str

    def __str__(self) -> str:
        return f"{self.where}: {self.message}"

    def to_json(self) -> dict[str, str]:
        return {"where": self.where, "message": self.message}


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
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise TopologyFileError(f"cannot read topology {path}: {exc}") from exc
    if not isinstance(data, dict):
        raise TopologyFileError(f"topology {path} is not a YAML mapping")
    return data


class _Reader:
    """Typed field access that records a Problem instead of raising, so every mistake is listed."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def get(
        self, data: dict[str, Any], key: str, kind: type | tuple[type, ...], default: Any, where: str
    ) -> Any:
        value = data.get(key, default)
        if value is None or value is default:
            return value
        # bool is an int in Python; a `true` where a number belongs is a mistake.
        if isinstance(value, bool) and kind in (int, float, (int, float)):
            self.problems.append(Problem(f"{where}.{key}", f"expected a number, got {value!r}"))
            return default
        if kind is float and isinstance(value, int):
            return float(value)
        if not isinstance(value, kind):
            self.problems.append(Problem(f"{where}.{key}", f"expected {_kind_name(kind)}, got {value!r}"))
            return default
        return value

    def str_map(self, data: dict[str, Any], key: str, where: str) -> dict[str, str]:
        raw = self.get(data, key, dict, {}, where) or {}
        return {str(k): _env_value(v) for k, v in raw.items()}


def _kind_name(kind: type | tuple[type, ...]) -> str:
    kinds = kind if isinstance(kind, tuple) else (kind,)
    names = {int: "an integer", float: "a number", str: "a string", dict: "a mapping", list: "a list"}
    return " or ".join(names.get(k, k.__name__) for k in kinds)


def _env_value(value: Any) -> str:
    # YAML `true`/`1` in an env mapping means the string NCCL reads, not Python's spelling.
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _int_list(reader: _Reader, data: dict[str, Any], key: str, where: str) -> tuple[int, ...]:
    raw = reader.get(data, key, list, [], where) or []
    good = [v for v in raw if isinstance(v, int) and not isinstance(v, bool)]
    if len(good) != len(raw):
        reader.problems.append(Problem(f"{where}.{key}", f"expected a list of integers, got {raw!r}"))
    return tuple(good)


def _name_list(
    reader: _Reader, data: dict[str, Any], key: str, default: list[str], where: str
) -> tuple[str, ...]:
    raw = data.get(key, default)
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw) or not raw:
        reader.problems.append(
            Problem(f"{where}.{key}", f"expected a node name or a list of them, got {raw!r}")
        )
        return tuple(default)
    return tuple(raw)


def _speculative(reader: _Reader, data: dict[str, Any], where: str) -> Speculative | None:
    raw = reader.get(data, "speculative", dict, None, where)
    if not raw:
        return None
    at = f"{where}.speculative"
    algorithm = reader.get(raw, "algorithm", str, None, at)
    return Speculative(
        algorithm=algorithm.upper() if algorithm else None,
        num_steps=reader.get(raw, "num_steps", int, None, at),
        eagle_topk=reader.get(raw, "eagle_topk", int, None, at),
        num_draft_tokens=reader.get(raw, "num_draft_tokens", int, None, at),
        draft_model_path=reader.get(raw, "draft_model_path", str, None, at),
    )


def _server(
    reader: _Reader, data: Any, index: int, defaults: dict[str, Any], first_node: str
) -> Server | None:
    if not isinstance(data, dict):
        reader.problems.append(Problem(f"servers[{index}]", f"expected a mapping, got {data!r}"))
        return None
    merged = {**defaults, **data}
    # Mappings merge one level deep, so a server can add one flag without restating the defaults.
    for key in MERGED_MAPPINGS:
        if isinstance(defaults.get(key), dict) and isinstance(data.get(key), dict):
            merged[key] = {**defaults[key], **data[key]}
    name = merged.get("name")
    where = f"server {name}" if isinstance(name, str) and name else f"servers[{index}]"
    if not isinstance(name, str) or not name:
        reader.problems.append(Problem(where, "every server needs a name"))
    role = reader.get(merged, "role", str, "regular", where)
    return Server(
        name=name if isinstance(name, str) else f"server{index}",
        role=role,
        nodes=_name_list(reader, merged, "nodes", [merged.get("node", first_node)], where),
        gpus=_int_list(reader, merged, "gpus", where),
        tp=reader.get(merged, "tp", int, 1, where),
        dp=reader.get(merged, "dp", int, 1, where),
        ep=reader.get(merged, "ep", int, None, where),
        port=reader.get(merged, "port", int, SGLANG_DEFAULT_PORT, where),
        bootstrap_port=reader.get(
            merged, "bootstrap_port", int, SGLANG_DEFAULT_BOOTSTRAP_PORT if role == "prefill" else None, where
        ),
        dist_init_port=reader.get(merged, "dist_init_port", int, DEFAULT_DIST_INIT_PORT, where),
        mem_fraction_static=reader.get(merged, "mem_fraction_static", float, None, where),
        attention_backend=reader.get(merged, "attention_backend", str, None, where),
        kv_cache_dtype=reader.get(merged, "kv_cache_dtype", str, None, where),
        context_length=reader.get(merged, "context_length", int, None, where),
        chunked_prefill_size=reader.get(merged, "chunked_prefill_size", int, None, where),
        cuda_graph_max_bs_decode=reader.get(merged, "cuda_graph_max_bs_decode", int, None, where),
        num_continuous_decode_steps=reader.get(merged, "num_continuous_decode_steps", int, None, where),
        transfer_backend=reader.get(merged, "transfer_backend", str, None, where),
        speculative=_speculative(reader, merged, where),
        nccl=reader.str_map(merged, "nccl", where),
        env=reader.str_map(merged, "env", where),
        args=dict(reader.get(merged, "args", dict, {}, where) or {}),
    )


def _nodes(reader: _Reader, data: dict[str, Any], node_gpus: int) -> tuple[Node, ...]:
    raw = reader.get(data, "nodes", list, None, "topology")
    if not raw:
        return (Node(LOCAL_NODE, None, node_gpus),)
    nodes = []
    for index, entry in enumerate(raw):
        where = f"nodes[{index}]"
        if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
            reader.problems.append(Problem(where, f"expected a mapping with a name, got {entry!r}"))
            continue
        nodes.append(
            Node(
                name=entry["name"],
                address=reader.get(entry, "address", str, None, f"node {entry['name']}"),
                gpus=reader.get(entry, "gpus", int, node_gpus, f"node {entry['name']}"),
            )
        )
    return tuple(nodes) or (Node(LOCAL_NODE, None, node_gpus),)


def _model(reader: _Reader, data: dict[str, Any]) -> Model:
    raw = reader.get(data, "model", dict, {}, "topology") or {}
    path = reader.get(raw, "path", str, "", "model") or ""
    if not path:
        reader.problems.append(Problem("model.path", "the model path inside the container is required"))
    return Model(
        path=path,
        host_path=reader.get(raw, "host_path", str, path, "model") or path,
        served_name=reader.get(raw, "served_name", str, None, "model"),
        quantization=reader.get(raw, "quantization", str, None, "model"),
        preset=reader.get(raw, "preset", str, None, "model"),
        weights_gb=reader.get(raw, "weights_gb", float, None, "model"),
    )


def load_topology(data: dict[str, Any], node_gpus: int = DEFAULT_NODE_GPUS) -> tuple[Topology, list[Problem]]:
    """Normalize a topology mapping; returns the model and the type problems found on the way."""
    reader = _Reader()
    name = reader.get(data, "name", str, "", "topology") or ""
    nodes = _nodes(reader, data, node_gpus)
    defaults = reader.get(data, "server_defaults", dict, {}, "topology") or {}
    raw_servers = reader.get(data, "servers", list, [], "topology") or []
    servers = [_server(reader, s, i, defaults, nodes[0].name) for i, s in enumerate(raw_servers)]
    raw_router = reader.get(data, "router", dict, {}, "topology") or {}
    router = Router(
        node=reader.get(raw_router, "node", str, nodes[0].name, "router"),
        port=reader.get(raw_router, "port", int, ROUTER_DEFAULT_PORT, "router"),
        prometheus_port=reader.get(
            raw_router, "prometheus_port", int, ROUTER_DEFAULT_PROMETHEUS_PORT, "router"
        ),
        policy=reader.get(raw_router, "policy", str, ROUTER_DEFAULT_POLICY, "router"),
        args=dict(reader.get(raw_router, "args", dict, {}, "router") or {}),
    )
    topology = Topology(
        name=name,
        description=reader.get(data, "description", str, "", "topology") or "",
        model=_model(reader, data),
        nodes=nodes,
        network=reader.get(data, "network", str, "bridge", "topology"),
        servers=tuple(s for s in servers if s is not None),
        router=router,
        nccl=reader.str_map(data, "nccl", "topology"),
        source=data,
    )
    return topology, reader.problems
