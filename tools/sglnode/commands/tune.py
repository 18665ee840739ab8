"""`sglnode tune`: the tuning campaign (docs/tune.md).

  run SPEC --out DIR       deploy, wait, bench and tear down every candidate; table, JSON, plot, winner
  candidates SPEC          the candidates a spec expands to, and which are refused and why (no deploy)
  nccl FILE --tp N         rank NCCL variants from an all-reduce sweep (tools/gpu/tune-node.sh)
  moe-coverage             fused-MoE Triton configs SGLang ships for this GPU, per preset and TP/EP

Exit codes (run): 0 a winner met the SLO; 1 no candidate met it; 5 aborted (a candidate leaked
containers or ports); 130/143 interrupted (partial results written: rerun to resume); 64 bad usage
or spec. moe-coverage: 0 every Triton-run shape has a tuned config for this Triton; 1 some are
missing (listed); 2 the image could not be run.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sglnode.exitcodes import EXIT_USAGE
from sglnode.topology.model import TopologyFileError
from sglnode.tune.nccl import MeasurementError, load_measurements, score_variants
from sglnode.tune.spec import DEFAULT_DECODE_BAND_BYTES, SpecError, load_spec

EXIT_PROBE_FAILED = 2


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "tune",
        help="tuning campaign: sweep candidate configurations, pick the winner under an SLO",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="tune_command", metavar="ACTION", required=True)

    run = actions.add_parser("run", help="run (or resume) a sweep")
    run.add_argument("spec", type=Path, help="sweep spec (YAML, docs/tune.md)")
    run.add_argument("--out", type=Path, required=True, help="output directory (state, results, winner)")
    run.add_argument("--fresh", action="store_true", help="ignore the state file of an earlier run")
    run.add_argument("--nccl-measurements", type=Path, help="all-reduce sweep JSON (overrides the spec's)")
    run.add_argument("--moe-config-dir", type=Path, help="MoE config cache root (overrides the spec's)")
    run.set_defaults(func=run_run)

    env = actions.add_parser("nccl-env", help="the full NCCL env of each of a spec's variants (JSON)")
    env.add_argument("spec", type=Path)
    env.add_argument("--p2p-unsafe", action="store_true", help="preflight found ACS/IOMMU on the GPU path")
    env.set_defaults(func=run_nccl_env)

    listing = actions.add_parser("candidates", help="list the candidates and the vetting verdicts")
    listing.add_argument("spec", type=Path)
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=run_candidates)

    nccl = actions.add_parser("nccl", help="rank NCCL variants from an all-reduce sweep JSON")
    nccl.add_argument("file", type=Path)
    nccl.add_argument("--tp", type=int, default=8, help="TP size to rank for (default 8)")
    nccl.add_argument("--band", default=f"{DEFAULT_DECODE_BAND_BYTES[0]},{DEFAULT_DECODE_BAND_BYTES[1]}")
    nccl.add_argument("--json", action="store_true")
    nccl.set_defaults(func=run_nccl)

    moe = actions.add_parser("moe-coverage", help="which fused-MoE Triton configs SGLang ships for this GPU")
    moe.add_argument("--image", help="SGLang image (default: .cache/sglang-image.tag, else the role's tag)")
    moe.add_argument("--preset", action="append", help="model preset (repeatable; default: every MoE preset)")
    moe.add_argument("--tp", default="1,2,4,8", help="TP sizes (comma list)")
    moe.add_argument("--ep", default="1", help="EP sizes (comma list; those dividing TP are used)")
    moe.add_argument("--device-name", default=None, help="GPU name (default: the GPU preset's)")
    moe.add_argument("--config-dir", type=Path, help="a MoE config cache root, as SGLANG_MOE_CONFIG_DIR")
    moe.add_argument("--json", action="store_true")
    moe.set_defaults(func=run_moe)


def run_run(args: argparse.Namespace) -> int:
    from sglnode.tune.campaign import run_campaign  # noqa: PLC0415 - bench stack only when running

    overrides = {
        "nccl_measurements": str(args.nccl_measurements.resolve()) if args.nccl_measurements else None,
        "moe_config_dir": str(args.moe_config_dir.resolve()) if args.moe_config_dir else None,
    }
    try:
        code, _ = run_campaign(
            args.spec,
            args.out,
            resume=not args.fresh,
            overrides={k: v for k, v in overrides.items() if v is not None},
        )
    except (SpecError, TopologyFileError, MeasurementError, ValueError) as exc:
        _print_spec_error(exc)
        return EXIT_USAGE
    return code


def _print_spec_error(exc: Exception) -> None:
    if isinstance(exc, SpecError):
        print(f"error: {exc.source}: invalid sweep spec", file=sys.stderr)
        for problem in exc.problems:
            print(f"  - {problem}", file=sys.stderr)
    else:
        print(f"error: {exc}", file=sys.stderr)


def run_candidates(args: argparse.Namespace) -> int:
    from sglnode.tune.campaign import plan_candidates  # noqa: PLC0415

    try:
        loaded = load_spec(args.spec)
        candidates, nccl, notes = plan_candidates(loaded)
    except (SpecError, TopologyFileError, MeasurementError, ValueError) as exc:
        _print_spec_error(exc)
        return EXIT_USAGE
    if args.json:
        payload = {
            "candidates": [{k: v for k, v in c.to_json().items() if k != "topology"} for c in candidates],
            "nccl": nccl.to_json(),
            "notes": notes,
        }
        print(json.dumps(payload, indent=2))
        return 0
    for index, candidate in enumerate(candidates, 1):
        print(f"{index:>2}  {candidate.id}  {candidate.verdict:<16} {candidate.label}")
        for line in candidate.reasons + candidate.notes:
            print(f"      {line}")
    for note in notes:
        print(f"note: {note}")
    return 0


def run_nccl_env(args: argparse.Namespace) -> int:
    from sglnode.tune.campaign import nccl_env_variants  # noqa: PLC0415

    try:
        variants = nccl_env_variants(load_spec(args.spec), p2p_safe=not args.p2p_unsafe)
    except (SpecError, TopologyFileError, ValueError) as exc:
        _print_spec_error(exc)
        return EXIT_USAGE
    print(json.dumps(variants, indent=2))
    return 0


def run_nccl(args: argparse.Namespace) -> int:
    try:
        band = [int(v) for v in args.band.split(",")]
        measurements = load_measurements(args.file)
    except (ValueError, MeasurementError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    scores = score_variants(measurements, args.tp, band)
    if args.json:
        print(json.dumps([s.to_json() for s in scores], indent=2))
        return 0
    if measurements.plumbing_only:
        print(f"NOTE: backend {measurements.backend} on {measurements.device}: a plumbing run, not NCCL")
    print(f"TP {args.tp}, decode band {band[0]}-{band[1]} B (mean p50 latency), best first:")
    for score in scores:
        figure = (
            f"{score.band_us:9.1f} us  peak busbw {score.peak_busbw_gbps:6.2f} GB/s" if score.ok else "FAILED"
        )
        print(f"  {score.variant:<20} {figure}  {score.note}")
    return 0


def run_moe(args: argparse.Namespace) -> int:
    from sglnode.tune import moe  # noqa: PLC0415

    try:
        tps = [int(v) for v in args.tp.split(",")]
        eps = [int(v) for v in args.ep.split(",")]
        presets = args.preset or moe.moe_presets()
        rows = moe.plan_rows(presets, tps, eps)
    except (ValueError, moe.PresetError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    image = args.image or moe.default_image()
    try:
        report = moe.coverage(rows, image, device_name=args.device_name, config_dir=args.config_dir)
    except moe.ProbeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_PROBE_FAILED
    if args.json:
        print(json.dumps(report, indent=2))
    else:
        sys.stdout.write(moe.render_coverage(report))
    return 1 if report["missing"] else 0
