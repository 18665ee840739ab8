"""`sglnode topology check|render`: validate a topology file, or write what the roles would write.

Exit codes: 0 valid (check) / rendered (render); 1 the topology has problems (every one listed,
naming server and field); 2 the file cannot be read (missing, not UTF-8 text, over 1 MiB, YAML
aliases beyond a small budget, not a mapping); 3 (render) nothing was written: a file in the output
was edited by hand since the last render (kept; `--force` overwrites it) or a target is in the way;
64 bad command line.

`render` writes all files or none: they are staged in a temporary directory inside `--out` and moved
into place only when every one is ready. `--out/.sglnode-render.json` records the SHA-256 of each
rendered file, so a later render tells sglnode's files from hand edits.
JSON (`check --json`): {"valid": bool, "topology": str, "problems": [{"where", "message"}],
"memory": [{"server", "fits", "failure_phase", "reason", "plan"}],
"kernels": [{"server", "field", "choice", "auto", "verdict", "detail", "source"}]}.

The kernel check reads the image's kernel audit (`--kernel-audit`, default: the copy of the last
`make image` audit shipped in sglnode/topology/kernel-audit.json) and refuses backend choices whose
kernels do not run on sm_120 (docs/topologies.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from sglnode.exitcodes import EXIT_USAGE
from sglnode.pins import PINS
from sglnode.topology.check import check_topology, format_problems
from sglnode.topology.kernels import KernelAuditError, KernelFinding, check_kernels, describe, load_audit
from sglnode.topology.memory import check_memory
from sglnode.topology.model import DEFAULT_NODE_GPUS, Problem, TopologyFileError, read_topology_file
from sglnode.topology.render import DEFAULT_BIND_ADDRESS, RenderOptions, render
from sglnode.topology.schema import MAX_NODE_GPUS
from sglnode.topology.write import MANIFEST, WriteError, write_atomically

EXIT_OK = 0
EXIT_INVALID = 1
EXIT_UNREADABLE = 2
EXIT_NOT_WRITTEN = 3
DEFAULT_GPU_PRESET = PINS.gpu.preset


def _node_gpus(text: str) -> int:
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from exc
    if not 1 <= value <= MAX_NODE_GPUS:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_NODE_GPUS}, got {value}")
    return value


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("topology", help="validate a serving topology or render its files")
    actions = parser.add_subparsers(dest="topology_command", metavar="ACTION", required=True)

    check = actions.add_parser("check", help="list every problem of a topology file (exit 1 if any)")
    check.add_argument("file", type=Path)
    check.add_argument(
        "--node-gpus", type=_node_gpus, default=DEFAULT_NODE_GPUS, help="GPUs per node (default: 8)"
    )
    check.add_argument("--gpu", default=DEFAULT_GPU_PRESET, help="GPU preset for the memory preflight")
    check.add_argument("--no-memory", action="store_true", help="skip the planner's memory preflight")
    check.add_argument(
        "--kernel-audit",
        type=Path,
        help="the image's /opt/sglnode/kernel-audit.json (default: the last make image's, shipped)",
    )
    check.add_argument("--no-kernels", action="store_true", help="skip the sm_120 kernel check")
    check.add_argument("--json", action="store_true", help="print the result as JSON")
    check.set_defaults(func=run_check)

    out = actions.add_parser("render", help="write the files the nccl_env and sglang_serve roles write")
    out.add_argument("file", type=Path)
    out.add_argument("--out", type=Path, required=True, help="directory standing in for the node's /")
    out.add_argument("--runtime", choices=("real", "sim"), default="real")
    out.add_argument("--bind-address", default=DEFAULT_BIND_ADDRESS, help="address published ports bind to")
    out.add_argument("--node", help="node to render for (multi-node topologies; default: the first)")
    out.add_argument("--prefix", default="", help="node_prefix the units' paths point under")
    out.add_argument("--node-gpus", type=_node_gpus, default=DEFAULT_NODE_GPUS)
    out.add_argument(
        "--p2p-level",
        default="",
        metavar="LEVEL",
        help="NCCL_P2P_LEVEL preflight read from the PCIe topology (LOC, NVL, PIX, PXB, PHB, SYS)",
    )
    out.add_argument("--p2p-unsafe", action="store_true", help="preflight found ACS/IOMMU on the GPU path")
    out.add_argument("--infiniband", action="store_true", help="the node has InfiniBand")
    out.add_argument("--api-key", action="store_true", help="reference the API key secret files")
    out.add_argument(
        "--moe-config-dir",
        default="",
        metavar="DIR",
        help="host path of a tuned fused-MoE config cache to mount as SGLANG_MOE_CONFIG_DIR (docs/tune.md)",
    )
    out.add_argument(
        "--force",
        action="store_true",
        help=f"overwrite files edited by hand since the last render ({MANIFEST})",
    )
    out.set_defaults(func=run_render)


def _load(path: Path) -> dict[str, Any] | None:
    try:
        return read_topology_file(path)
    except TopologyFileError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None


def run_check(args: argparse.Namespace) -> int:
    data = _load(args.file)
    if data is None:
        return EXIT_UNREADABLE
    topology, problems = check_topology(data, node_gpus=args.node_gpus)
    verdicts = []
    findings: list[KernelFinding] = []
    if not problems and not args.no_memory:
        verdicts, memory_problems = check_memory(topology, args.gpu)
        problems.extend(memory_problems)
    if not problems and not args.no_kernels:
        try:
            audit = load_audit(args.kernel_audit)
        except KernelAuditError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return EXIT_UNREADABLE
        findings, kernel_problems = check_kernels(topology, audit)
        problems.extend(kernel_problems)
    if args.json:
        result = {
            "valid": not problems,
            "topology": topology.name,
            "problems": [p.to_json() for p in problems],
            "memory": [v.to_json() for v in verdicts],
            "kernels": [f.to_json() for f in findings],
        }
        print(json.dumps(result, indent=2))
    elif problems:
        print(f"topology {topology.name or args.file}: {len(problems)} problem(s)")
        print(format_problems(problems))
    else:
        memory = "" if args.no_memory else f"; memory preflight fits on {args.gpu} (planner estimate)"
        kernels = "" if args.no_kernels else "; every backend choice has sm_120 kernels in the image"
        print(f"topology {topology.name}: valid ({len(topology.servers)} server(s)){memory}{kernels}")
        for finding in findings:
            if finding.auto or finding.verdict != "runs":
                print(f"  {describe(finding)}")
    return EXIT_INVALID if problems else EXIT_OK


def run_render(args: argparse.Namespace) -> int:
    data = _load(args.file)
    if data is None:
        return EXIT_UNREADABLE
    topology, problems = check_topology(data, node_gpus=args.node_gpus)
    if args.node and topology.node(args.node) is None:
        problems.append(Problem("--node", f"{args.node!r} is not a node of the topology"))
    if problems:
        print(
            f"topology {topology.name or args.file}: not rendered, {len(problems)} problem(s)",
            file=sys.stderr,
        )
        print(format_problems(problems), file=sys.stderr)
        return EXIT_INVALID
    try:
        options = RenderOptions(
            runtime=args.runtime,
            node=args.node,
            bind_address=args.bind_address,
            prefix=args.prefix,
            p2p_safe=not args.p2p_unsafe,
            p2p_level=args.p2p_level,
            infiniband=args.infiniband,
            api_key=args.api_key,
            moe_config_dir=args.moe_config_dir,
        )
    except ValueError as exc:
        print(f"sglnode topology render: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        result = write_atomically(args.out, render(topology, options), force=args.force)
    except (WriteError, OSError) as exc:
        print(f"topology {topology.name}: not rendered into {args.out}: {exc}", file=sys.stderr)
        return EXIT_NOT_WRITTEN
    if result.kept:
        print(
            f"topology {topology.name}: nothing written; {len(result.kept)} file(s) in {args.out} were "
            f"changed by hand since the last render ({MANIFEST}) and are kept (--force overwrites them):",
            file=sys.stderr,
        )
        for path in result.kept:
            print(f"  - {path}", file=sys.stderr)
        return EXIT_NOT_WRITTEN
    for path in result.overwritten_edits:
        print(f"warning: overwrote {path}, which was changed by hand since the last render", file=sys.stderr)
    for path in result.written:
        print(path)
    for path in result.unchanged:
        print(f"{path} (unchanged)")
    return EXIT_OK
