"""The one topology validator: every problem is listed, each naming the server (or section) and field.

Used by `sglnode topology check`, by `sglnode topology render` (which refuses invalid input) and by
the Ansible filter plugin, so the playbook rejects exactly what the CLI rejects, before any change.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from typing import Any

from sglnode.topology.flags import (
    FIELD_FLAGS,
    ROUTER_POLICIES,
    FlagCatalog,
    load_catalog,
    load_nccl_defaults,
    normalize_flag,
)
from sglnode.topology.model import (
    DEFAULT_NODE_GPUS,
    NETWORK_MODES,
    ROLES,
    Problem,
    Server,
    Topology,
    load_topology,
)
from sglnode.topology.render import gpu_progression, sees_every_gpu
from sglnode.topology.schema import suggest

# SGLang asserts 0 < mem_fraction_static < 1; above 0.98 nothing is left for activations, CUDA
# graphs and NCCL buffers, so the load fails late (after minutes of weight loading) instead of here.
MEM_FRACTION_MAX = 0.98
PORT_MIN = 1
PORT_MAX = 65535
# Names become compose service names, file names and systemd unit names.
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
# Tree-drafting algorithms need steps, top-k and draft-token count; these also need a draft model,
# except on architectures whose checkpoint carries MTP layers: the pinned SGLang's EAGLE handler then
# drafts with the target path itself (srt/arg_groups/speculative_hook.py, _handle_eagle_family).
TREE_SPECULATIVE = ("EAGLE", "EAGLE3", "NEXTN", "STANDALONE")
NEEDS_DRAFT_MODEL = ("EAGLE", "EAGLE3", "STANDALONE")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
MANAGED_FLAGS = {flag: field for field, flag in FIELD_FLAGS.items()}


def check_topology(
    data: dict[str, Any], node_gpus: int = DEFAULT_NODE_GPUS
) -> tuple[Topology, list[Problem]]:
    """Normalize and check a topology mapping; an empty problem list means it can be rendered."""
    topology, problems = load_topology(data, node_gpus)
    catalog = load_catalog()
    problems.extend(_check_names(topology))
    problems.extend(_check_nodes(topology))
    draft_in_checkpoint = _model_drafts_from_its_checkpoint(topology)
    for server in topology.servers:
        problems.extend(_check_server(topology, server, catalog, draft_in_checkpoint))
    problems.extend(_check_model_fit(topology))
    problems.extend(_check_gpu_sharing(topology))
    problems.extend(_check_ports(topology))
    problems.extend(_check_pd(topology))
    problems.extend(_check_router(topology))
    return topology, problems


def _model_drafts_from_its_checkpoint(topology: Topology) -> bool:
    """SGLang uses the target checkpoint's own MTP layers as the EAGLE draft for some architectures."""
    if not topology.model.preset:
        return False
    # Imported here: sglnode.planning reads its files through sglnode.topology's loader.
    from sglnode.planning.presets import PresetError, load_model_preset  # noqa: PLC0415

    try:
        return load_model_preset(topology.model.preset).sglang.draft_in_checkpoint
    except PresetError:
        return False  # an unknown preset is reported by the memory preflight


def _check_model_fit(topology: Topology) -> Iterator[Problem]:
    """What SGLang refuses for this model whatever the memory: a TP size its heads do not split into."""
    if not topology.model.preset:
        return
    from sglnode.planning.planner import tp_problems  # noqa: PLC0415 - see _model_drafts_from_its_checkpoint
    from sglnode.planning.presets import PresetError, load_model_preset  # noqa: PLC0415

    try:
        model = load_model_preset(topology.model.preset)
    except PresetError:
        return  # reported by the memory preflight, with the known presets
    for server in topology.servers:
        for message in tp_problems(model, server.tp):
            yield Problem(f"server {server.name}.tp", message)


def _check_names(topology: Topology) -> Iterator[Problem]:
    if not NAME_PATTERN.match(topology.name):
        yield Problem("topology.name", f"{topology.name!r} must be lowercase letters, digits and '-'")
    if not topology.servers:
        yield Problem("topology.servers", "a topology needs at least one server")
    seen: set[str] = set()
    for server in topology.servers:
        if server.name == "router":
            yield Problem(f"server {server.name}.name", "'router' is the router's service name")
        elif not NAME_PATTERN.match(server.name):
            yield Problem(f"server {server.name}.name", "must be lowercase letters, digits and '-'")
        if server.name in seen:
            yield Problem(f"server {server.name}.name", "used by more than one server")
        seen.add(server.name)


def _check_profile(where: str, profile: str | None) -> Iterator[Problem]:
    if profile is None:
        return
    known = sorted(load_nccl_defaults()["profiles"])
    if profile not in known:
        yield Problem(
            where,
            f"{profile!r} is not an NCCL profile of sglnode/topology/nccl.yaml; {suggest(profile, known)}",
        )


def _check_nodes(topology: Topology) -> Iterator[Problem]:
    yield from _check_profile("topology.nccl_profile", topology.nccl_profile)
    for name in topology.nccl:
        if not ENV_NAME.match(name):
            yield Problem(f"topology.nccl.{name}", "is not a valid environment variable name")
    if topology.network not in NETWORK_MODES:
        yield Problem("topology.network", f"{topology.network!r} is not one of {', '.join(NETWORK_MODES)}")
    names = [n.name for n in topology.nodes]
    for name in {n for n in names if names.count(n) > 1}:
        yield Problem(f"node {name}.name", "used by more than one node")
    if len(topology.nodes) > 1:
        # Other nodes reach rank 0, the bootstrap port and the router only on the host's address.
        if topology.network != "host":
            yield Problem("topology.network", "a topology on more than one node needs network: host")
        for node in topology.nodes:
            if not node.address:
                yield Problem(f"node {node.name}.address", "needed when the topology spans nodes")


def _check_server(
    topology: Topology, server: Server, catalog: FlagCatalog, draft_in_checkpoint: bool = False
) -> Iterator[Problem]:
    at = f"server {server.name}"
    if server.role not in ROLES:
        yield Problem(f"{at}.role", f"{server.role!r} is not one of {', '.join(ROLES)}")
    yield from _check_placement(topology, server)
    for field_name in ("tp", "dp"):
        if getattr(server, field_name) < 1:
            yield Problem(f"{at}.{field_name}", "must be at least 1")
    if server.tp >= 1 and server.dp >= 1 and server.tp * server.dp != server.gpu_count:
        yield Problem(
            f"{at}.tp",
            f"tp ({server.tp}) * dp ({server.dp}) = {server.tp * server.dp} but the server has "
            f"{server.gpu_count} GPUs ({len(server.gpus)} on each of {len(server.nodes)} node(s))",
        )
    fraction = server.mem_fraction_static
    if fraction is not None and not 0 < fraction <= MEM_FRACTION_MAX:
        yield Problem(f"{at}.mem_fraction_static", f"{fraction} is outside (0, {MEM_FRACTION_MAX}]")
    yield from _check_choice(at, "attention_backend", server.attention_backend, catalog)
    yield from _check_choice(at, "kv_cache_dtype", server.kv_cache_dtype, catalog)
    if server.transfer_backend is not None:
        yield from _check_choice(at, "transfer_backend", server.transfer_backend, catalog)
        if server.role == "regular":
            yield Problem(f"{at}.transfer_backend", "only prefill and decode servers transfer KV")
    yield from _check_positive(at, server)
    for field_name in ("nccl", "env"):
        for name in getattr(server, field_name):
            if not ENV_NAME.match(name):
                yield Problem(f"{at}.{field_name}.{name}", "is not a valid environment variable name")
    yield from _check_profile(f"{at}.nccl_profile", server.nccl_profile)
    yield from _check_speculative(at, server, catalog, draft_in_checkpoint)
    yield from check_args(f"{at}.args", server.args, catalog)


def _check_placement(topology: Topology, server: Server) -> Iterator[Problem]:
    at = f"server {server.name}"
    if not server.gpus:
        yield Problem(f"{at}.gpus", "list the GPU indices this server runs on")
    for name in server.nodes:
        node = topology.node(name)
        if node is None:
            yield Problem(f"{at}.nodes", f"node {name!r} is not in the topology's nodes")
            continue
        outside = [g for g in server.gpus if not 0 <= g < node.gpus]
        if outside:
            yield Problem(f"{at}.gpus", f"GPU(s) {outside} are outside node {name}'s GPUs 0-{node.gpus - 1}")
    repeated = sorted({g for g in server.gpus if server.gpus.count(g) > 1})
    if repeated:
        yield Problem(f"{at}.gpus", f"GPU(s) {repeated} listed more than once")
    elif server.gpus and sees_every_gpu(topology, server) and gpu_progression(server.gpus) is None:
        yield Problem(
            f"{at}.gpus",
            f"{list(server.gpus)}: a PD server's container sees every GPU and picks its own with "
            "--base-gpu-id and --gpu-id-step, so list them as base, base + step, ... (e.g. [4, 5, 6, 7])",
        )


def _check_choice(at: str, field_name: str, value: str | None, catalog: FlagCatalog) -> Iterator[Problem]:
    if value is None:
        return
    choices = catalog.choices(FIELD_FLAGS[field_name])
    if choices and value not in choices:
        yield Problem(
            f"{at}.{field_name}",
            f"{value!r} is not a {FIELD_FLAGS[field_name]} choice in SGLang {catalog.version}: "
            f"{', '.join(choices)}",
        )


def _check_positive(at: str, server: Server) -> Iterator[Problem]:
    for field_name in (
        "ep",
        "context_length",
        "cuda_graph_max_bs_decode",
        "num_continuous_decode_steps",
        "dist_init_port",
    ):
        value = getattr(server, field_name)
        if value is not None and value < 1:
            yield Problem(f"{at}.{field_name}", f"must be a positive integer, got {value}")
    # SGLang reads --chunked-prefill-size -1 as "no chunking" (srt/arg_groups/fields/schedule.py:52).
    chunked = server.chunked_prefill_size
    if chunked is not None and chunked != -1 and chunked < 1:
        yield Problem(
            f"{at}.chunked_prefill_size", f"must be -1 (no chunking) or a positive integer, got {chunked}"
        )


def _check_speculative(
    at: str, server: Server, catalog: FlagCatalog, draft_in_checkpoint: bool
) -> Iterator[Problem]:
    spec = server.speculative
    if spec is None:
        return
    where = f"{at}.speculative"
    if not spec.algorithm:
        yield Problem(f"{where}.algorithm", "required when speculative is set")
        return
    if spec.algorithm not in catalog.speculative_algorithms:
        yield Problem(
            f"{where}.algorithm",
            f"{spec.algorithm!r} is not one of {', '.join(catalog.speculative_algorithms)}",
        )
    if spec.algorithm in TREE_SPECULATIVE:
        for field_name in ("num_steps", "eagle_topk", "num_draft_tokens"):
            value = getattr(spec, field_name)
            if value is None:
                yield Problem(f"{where}.{field_name}", f"required for {spec.algorithm}")
            elif value < 1:
                yield Problem(f"{where}.{field_name}", f"must be at least 1, got {value}")
    if spec.algorithm in NEEDS_DRAFT_MODEL and not spec.draft_model_path and not draft_in_checkpoint:
        yield Problem(
            f"{where}.draft_model_path",
            f"{spec.algorithm} needs a draft model (only checkpoints with their own MTP layers, such as "
            "DeepSeek-V3/V4, draft without one)",
        )


def check_args(at: str, args: dict[str, Any], catalog: FlagCatalog) -> Iterator[Problem]:
    """Extra SGLang flags: each must exist in the pinned version and not restate a topology field."""
    for key, value in args.items():
        flag = normalize_flag(str(key))
        removed = catalog.removed.get(flag)
        if removed:
            yield Problem(
                f"{at}.{key}",
                f"{flag} does not exist in SGLang {catalog.version}; use {removed['replacement']} "
                f"({removed['why']})",
            )
            continue
        info = catalog.lookup(flag)
        if info is None:
            yield Problem(f"{at}.{key}", f"{flag} is not a launch flag of SGLang {catalog.version}")
            continue
        if info.name in MANAGED_FLAGS:
            yield Problem(f"{at}.{key}", f"{flag} comes from the topology field {MANAGED_FLAGS[info.name]}")
            continue
        if info.deprecated:
            yield Problem(
                f"{at}.{key}", f"{flag} is deprecated in SGLang {catalog.version}: {info.deprecated}"
            )
            continue
        yield from _check_arg_value(f"{at}.{key}", flag, info.takes_value, info.choices, value)


def _check_arg_value(
    at: str, flag: str, takes_value: bool, choices: tuple[str, ...], value: Any
) -> Iterator[Problem]:
    if not takes_value:
        if not isinstance(value, bool):
            yield Problem(at, f"{flag} is a switch: set it to true or false, got {value!r}")
        return
    if isinstance(value, bool) or value is None:
        yield Problem(at, f"{flag} takes a value, got {value!r}")
        return
    values = value if isinstance(value, list) else [value]
    bad = [str(v) for v in values if choices and str(v) not in choices]
    if bad:
        yield Problem(at, f"{bad} not among {flag}'s choices: {', '.join(choices)}")


def _port_owners(topology: Topology) -> dict[tuple[str, int], list[str]]:
    owners: dict[tuple[str, int], list[str]] = defaultdict(list)
    for server in topology.servers:
        owners[(server.head_node, server.port)].append(f"server {server.name}.port")
        if server.role == "prefill" and server.bootstrap_port is not None:
            owners[(server.head_node, server.bootstrap_port)].append(f"server {server.name}.bootstrap_port")
        if server.spans_nodes:
            owners[(server.head_node, server.dist_init_port)].append(f"server {server.name}.dist_init_port")
    router = topology.router
    owners[(router.node, router.port)].append("router.port")
    owners[(router.node, router.prometheus_port)].append("router.prometheus_port")
    return owners


def _check_ports(topology: Topology) -> Iterator[Problem]:
    owners = _port_owners(topology)
    for (node, port), users in sorted(owners.items()):
        for user in users:
            if not PORT_MIN <= port <= PORT_MAX:
                yield Problem(user, f"port {port} is outside {PORT_MIN}-{PORT_MAX}")
        if len(users) > 1:
            # Name the first owner in every other owner's message; the default ports count too.
            for user in users[1:]:
                yield Problem(user, f"port {port} on node {node} is also used by {users[0]}")


def _check_gpu_sharing(topology: Topology) -> Iterator[Problem]:
    first_user: dict[tuple[str, int], str] = {}
    for server in topology.servers:
        for node in server.nodes:
            for gpu in dict.fromkeys(server.gpus):
                other = first_user.setdefault((node, gpu), server.name)
                if other != server.name:
                    yield Problem(
                        f"server {server.name}.gpus", f"GPU {gpu} on node {node} is also used by {other}"
                    )


def _check_pd(topology: Topology) -> Iterator[Problem]:
    if not topology.is_pd:
        return
    roles = [s.role for s in topology.servers]
    for side in ("prefill", "decode"):
        if side not in roles:
            yield Problem("topology.servers", f"a PD topology needs a {side} server; found roles {roles}")
    for server in topology.servers:
        if server.role == "regular":
            yield Problem(f"server {server.name}.role", "a PD topology cannot also have regular servers")
    backends = {s.transfer_backend for s in topology.servers if s.role != "regular"}
    if len(backends) > 1:
        yield Problem("topology.servers", f"prefill and decode must use one transfer_backend, got {backends}")
    for server in topology.servers:
        if server.role == "decode" and server.bootstrap_port is not None:
            yield Problem(
                f"server {server.name}.bootstrap_port",
                "only a prefill server serves the KV bootstrap port (decode learns it from the router)",
            )
    yield from _check_pd_agreement(topology)


def _pd_setting(server: Server, name: str) -> Any:
    if name == "speculative":
        return server.speculative.algorithm if server.speculative else None
    if name == "page_size":
        return server.args.get("page_size", server.args.get("page-size"))
    return getattr(server, name)


# What prefill and decode must agree on: KV pages move as raw bytes, so both sides need one layout
# (the pinned SGLang's srt/disaggregation/utils.py:263 kv_layout_signature: "the same byte sizes under
# another dtype or page layout ... hold other bytes"; it only skips its checksum, it does not refuse),
# and an EAGLE-family prefill sends the draft's hidden states along (srt/disaggregation/prefill.py:943).
PD_AGREEMENT = {
    "kv_cache_dtype": "the KV pages decode receives are in prefill's dtype",
    "page_size": "KV moves page by page in one layout",
    "speculative": "prefill sends the draft model's hidden states with the KV for decode to draft from",
}


def _check_pd_agreement(topology: Topology) -> Iterator[Problem]:
    sides = [s for s in topology.servers if s.role in ("prefill", "decode")]
    for name, why in PD_AGREEMENT.items():
        values = {s.name: _pd_setting(s, name) for s in sides}
        if len(set(map(str, values.values()))) > 1:
            shown = ", ".join(f"{server}: {value}" for server, value in values.items())
            field = "speculative.algorithm" if name == "speculative" else name
            if name == "page_size":
                field = "args.page_size"
            yield Problem(
                f"topology.servers.{field}",
                f"prefill and decode servers must agree on {field} ({why}); got {shown}",
            )


def _check_router(topology: Topology) -> Iterator[Problem]:
    router = topology.router
    if router.policy not in ROUTER_POLICIES:
        yield Problem("router.policy", f"{router.policy!r} is not one of {', '.join(ROUTER_POLICIES)}")
    if topology.node(router.node) is None:
        yield Problem("router.node", f"node {router.node!r} is not in the topology's nodes")


def format_problems(problems: Iterable[Problem]) -> str:
    return "\n".join(f"  - {p}" for p in problems)
