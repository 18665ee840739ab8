"""`sglnode tune run` as a library call: spec -> candidates -> vetting -> sweep -> results.

Exit codes: 0 a winner met the SLO (and the sweep finished); 1 finished, but no candidate met the SLO;
5 aborted (a candidate leaked containers or ports: the next result would not be fair); 130/143
interrupted by SIGINT/SIGTERM (partial results written; rerun the same command to resume).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from sglnode.topology.check import check_topology
from sglnode.topology.kernels import load_audit
from sglnode.topology.model import read_topology_file
from sglnode.topology.render import RenderOptions, nccl_environment
from sglnode.tune.candidates import Candidate, apply_overrides, expand, vet
from sglnode.tune.deploy import ComposeDeployer
from sglnode.tune.nccl import NcclChoice
from sglnode.tune.results import build_results, render_table, write_outputs
from sglnode.tune.spec import LoadedSpec, load_spec, parse_spec
from sglnode.tune.sweep import Deployer, Sweep

EXIT_WINNER = 0
EXIT_NO_WINNER = 1
EXIT_ABORTED = 5
SIGNAL_EXIT_BASE = 128


def plan_candidates(loaded: LoadedSpec) -> tuple[list[Candidate], NcclChoice, list[str]]:
    """Expanded and vetted candidates (nothing deployed)."""
    spec = loaded.spec
    candidates, nccl, notes = expand(loaded)
    audit = load_audit(loaded.resolve(spec.kernel_audit) if spec.kernel_audit else None)
    for candidate in candidates:
        vet(candidate, audit, spec.gpu, spec.memory_preflight)
    for name, why in nccl.dropped.items():
        notes.append(f"NCCL variant {name} dropped: {why}")
    return candidates, nccl, notes


def nccl_env_variants(loaded: LoadedSpec, p2p_safe: bool = True) -> dict[str, dict[str, str]]:
    """Each NCCL variant's whole environment, as the serving container gets it (the PCIe defaults,
    the base topology's nccl:, the variant): what the all-reduce sweep must run under."""
    spec = loaded.spec
    base = read_topology_file(loaded.resolve(spec.base))
    declared = {name: {k: str(v) for k, v in env.items()} for name, env in spec.axes.nccl.items()}
    variants: dict[str, dict[str, str]] = {}
    for name, env in (declared or {"base": {}}).items():
        topology, problems = check_topology(apply_overrides(base, {}, env, []))
        if problems:
            raise ValueError(f"variant {name}: " + "; ".join(str(p) for p in problems))
        server = topology.servers[0]
        options = RenderOptions(p2p_safe=p2p_safe)
        variants[name] = {key: value for key, value, _ in nccl_environment(topology, server, options)}
    return variants


def with_overrides(loaded: LoadedSpec, overrides: dict[str, Any]) -> LoadedSpec:
    """The spec with command-line overrides (absolute paths), validated again."""
    if not overrides:
        return loaded
    data = loaded.spec.model_dump()
    if "nccl_measurements" in overrides:
        data["nccl_measurements"] = {
            **(data.get("nccl_measurements") or {}),
            "file": overrides["nccl_measurements"],
        }
    if "moe_config_dir" in overrides:
        data["moe_config_dir"] = overrides["moe_config_dir"]
    return loaded.model_copy(update={"spec": parse_spec(data, str(loaded.path))})


def run_campaign(
    spec_path: Path,
    out_dir: Path,
    *,
    resume: bool = True,
    deployer: Deployer | None = None,
    stdout: TextIO | None = None,
    overrides: dict[str, Any] | None = None,
) -> tuple[int, dict[str, Any]]:
    out = stdout if stdout is not None else sys.stdout
    loaded = with_overrides(load_spec(spec_path), overrides or {})
    candidates, nccl, notes = plan_candidates(loaded)
    out_dir.mkdir(parents=True, exist_ok=True)
    if deployer is None:
        moe = loaded.resolve(loaded.spec.moe_config_dir) if loaded.spec.moe_config_dir else None
        deployer = ComposeDeployer(loaded.spec, out_dir / "candidates", moe)

    def log(line: str) -> None:
        print(line, file=out, flush=True)

    sweep = Sweep(loaded, candidates, deployer, out_dir, resume=resume, log=log)
    run = sweep.run()
    results = build_results(
        loaded,
        run.state.data,
        [c.id for c in candidates],
        nccl.to_json() if nccl.source or nccl.variants else None,
        notes + run.notes,
        state_file=str(run.state.path),
        interrupted_by=run.interrupted_by,
        aborted=run.aborted,
    )
    paths = write_outputs(results, loaded, out_dir)
    print("", file=out)
    out.write(render_table(results, loaded.spec.slo))
    print("", file=out)
    for key, path in paths.items():
        print(f"{key + ':':<9} {path or '(none)'}", file=out)
    if run.interrupted_by is not None:
        print(f"interrupted: rerun the same command to resume ({run.state.path})", file=out)
        return SIGNAL_EXIT_BASE + run.interrupted_by, results
    if run.aborted:
        return EXIT_ABORTED, results
    return (EXIT_WINNER if results["winner"] else EXIT_NO_WINNER), results


__all__ = ["plan_candidates", "run_campaign"]
