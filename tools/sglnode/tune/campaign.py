"""`sglnode tune run` as a library call: spec -> candidates -> vetting -> sweep -> results.

Exit codes: 0 a winner met the SLO (and the sweep finished); 1 finished, but no candidate met the SLO;
5 aborted (a candidate leaked containers or ports: the next result would not be fair); 130/143
interrupted by SIGINT/SIGTERM (partial results written; rerun the same command to resume).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, TextIO

from sglnode.topology.kernels import load_audit
from sglnode.tune.candidates import Candidate, expand, vet
from sglnode.tune.deploy import ComposeDeployer
from sglnode.tune.nccl import NcclChoice
from sglnode.tune.results import build_results, render_table, write_outputs
from sglnode.tune.spec import LoadedSpec, load_spec
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


def run_campaign(
    spec_path: Path,
    out_dir: Path,
    resume: bool = True,
    deployer: Deployer | None = None,
    stdout: TextIO | None = None,
) -> tuple[int, dict[str, Any]]:
    out = stdout if stdout is not None else sys.stdout
    loaded = load_spec(spec_path)
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
