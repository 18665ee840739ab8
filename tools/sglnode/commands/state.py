"""`sglnode status` and `sglnode state begin|finish|target`: the node's deployment record.

`status` prints what runs now, the last known-good deployment, the rollback targets and the history of
attempts (`--json` for machines). The playbooks record every change: `state begin` before a switch,
upgrade or rollback (it keeps a copy of the topology file), `state finish` with the outcome, the
diagnosis of a failed start and the measured downtime (seconds without a ready router: from
`--down-since`, when the old router stopped serving, to the router's readiness in `--validate-report`),
and `state target` names what a rollback restores.

The state commands need nothing beyond Python's standard library: `python3 -m sglnode.commands.state
status|state ...` runs them where the full CLI's dependencies are not installed.
Exit codes: 0 done, 1 the transition is not allowed (e.g. an attempt still running), 64 usage.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from sglnode.deploy.state import (
    ACTIONS,
    DEFAULT_STATE_DIR,
    OUTCOMES,
    Deployment,
    StateError,
    StateStore,
    render_status,
)
from sglnode.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE


def _with_state_dir(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR, help="default: %(default)s")
    return parser


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = _with_state_dir(
        subparsers.add_parser("status", help="what is deployed, the last known-good state, the history")
    )
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=run_status)

    state = subparsers.add_parser("state", help="record deployment attempts (used by the playbooks)")
    actions = state.add_subparsers(dest="state_command", metavar="ACTION", required=True)
    begin = _with_state_dir(
        actions.add_parser("begin", help="record the start of a change; prints the attempt")
    )
    begin.add_argument("--action", choices=ACTIONS, required=True)
    begin.add_argument("--topology", type=Path, required=True, help="the topology file being deployed")
    begin.add_argument("--topology-name", required=True)
    begin.add_argument("--image", required=True, help="SGLang image reference")
    begin.add_argument("--image-id", default="")
    begin.add_argument("--router-image", default="", help="sglang-router image reference")
    begin.add_argument(
        "--sim-image", default="", help="simulated node only: the simulator image serving instead"
    )
    begin.add_argument("--sim-image-id", default="")
    begin.add_argument("--driver", default="", help="NVIDIA driver version")
    begin.add_argument("--cuda", default="", help="CUDA version")
    begin.add_argument("--note", default="")
    begin.set_defaults(func=run_begin)

    finish = _with_state_dir(actions.add_parser("finish", help="record how a change ended"))
    finish.add_argument("--attempt", type=int, required=True)
    finish.add_argument("--outcome", choices=[o for o in OUTCOMES if o != "running"], required=True)
    finish.add_argument("--diagnosis", type=Path, help="JSON of `sglnode wait --json` or `diagnose --json`")
    finish.add_argument("--cause", help="cause of a failure no report diagnoses (e.g. image_smoke_failed)")
    finish.add_argument("--detail", default="", help="one line on that cause")
    downtime = finish.add_mutually_exclusive_group()
    downtime.add_argument("--downtime", type=float, help="seconds without a ready router")
    downtime.add_argument(
        "--down-since",
        type=float,
        help="epoch seconds when the old router stopped serving; the downtime ends at the router's "
        "readiness in --validate-report",
    )
    finish.add_argument("--validate-report", type=Path, help="report.json of `sglnode validate`")
    finish.set_defaults(func=run_finish)

    target = _with_state_dir(actions.add_parser("target", help="the deployment a rollback restores, as JSON"))
    which = target.add_mutually_exclusive_group()
    which.add_argument("--known-good", action="store_true", help="the last known-good deployment (default)")
    which.add_argument("--index", type=int, help="N-th known-good deployment, newest first (0 = last)")
    target.set_defaults(func=run_target)


def _fail(message: str, code: int = EXIT_FAILED) -> int:
    print(f"sglnode state: {message}", file=sys.stderr)
    return code


def run_status(args: argparse.Namespace) -> int:
    store = StateStore(args.state_dir)
    try:
        state = store.read()
    except StateError as exc:
        return _fail(str(exc))
    if args.json:
        print(json.dumps({**state.to_json(), "state_dir": str(store.root)}, indent=2))
    else:
        print(render_status(state, store))
    return EXIT_OK


def run_begin(args: argparse.Namespace) -> int:
    store = StateStore(args.state_dir)
    try:
        sha = store.keep_topology(args.topology)
    except OSError as exc:
        return _fail(f"cannot read the topology {args.topology}: {exc}", EXIT_USAGE)
    target = Deployment(
        topology_name=args.topology_name,
        topology_sha256=sha,
        image_ref=args.image,
        image_id=args.image_id,
        router_image=args.router_image,
        sim_image=args.sim_image,
        sim_image_id=args.sim_image_id,
        driver_version=args.driver,
        cuda_version=args.cuda,
    )
    try:
        attempt = store.begin(args.action, target, note=args.note)
    except StateError as exc:
        return _fail(str(exc))
    print(json.dumps({**asdict(attempt), "topology_copy": str(store.topology_copy(sha))}, indent=2))
    return EXIT_OK


DIAGNOSIS_KEYS = ("cause", "phase", "rule_id", "fix", "confidence")


def _rollout_diagnosis(report: dict[str, Any]) -> dict[str, Any]:
    """Why a rollout check failed: the first failed server's diagnosis, else what its wait or the
    benchmark said (a timeout has no log line to diagnose; a missed target is no crash)."""
    waits = [w for w in report.get("waits") or [] if isinstance(w, dict)]
    for wait in waits:
        result = wait.get("result") or {}
        if wait.get("exit_code") not in (0, None) or result.get("diagnosis"):
            found = dict(result.get("diagnosis") or {})
            if not found:
                found = {"cause": f"not_ready:{result.get('outcome', 'exit ' + str(wait.get('exit_code')))}"}
            found["server"] = wait.get("server")
            return found
    if report.get("interrupted"):
        return {"cause": f"interrupted:{report['interrupted']}"}
    if report.get("exit_code") not in (0, None):
        missed = "bench_targets_missed" if report.get("bench") else f"validate_exit_{report['exit_code']}"
        return {"cause": missed}
    return {}


def _diagnosis(path: Path | None) -> dict[str, Any] | None:
    """The diagnosis object of a wait/diagnose JSON (or of the first failed server in a rollout report)."""
    if path is None:
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a JSON object")
    if "diagnosis" in data and isinstance(data["diagnosis"], dict):
        data = data["diagnosis"]
    elif "waits" in data:
        data = _rollout_diagnosis(data)
    found = {key: data.get(key) for key in (*DIAGNOSIS_KEYS, "server") if data.get(key) is not None}
    return found or None


def _router_ready_at(path: Path | None) -> float | None:
    """When the router of a rollout report became ready (epoch seconds), if it did."""
    if path is None:
        return None
    report = json.loads(path.read_text(encoding="utf-8"))
    waits = report.get("waits") or []
    routers = [w for w in waits if w.get("server") == "router" and w.get("exit_code") == 0]
    ready_at = routers[-1].get("ready_at") if routers else None
    return float(ready_at) if isinstance(ready_at, int | float) else None


def _summary(path: Path | None) -> dict[str, Any] | None:
    if path is None:
        return None
    report = json.loads(path.read_text(encoding="utf-8"))
    bench = report.get("bench") or {}
    stages = ((bench.get("report") or {}).get("stages")) or []
    return {
        "exit_code": report.get("exit_code"),
        "simulated": report.get("simulated"),
        "output_tok_s": {s.get("label", str(i)): s.get("output_tok_s") for i, s in enumerate(stages)},
    }


def run_finish(args: argparse.Namespace) -> int:
    store = StateStore(args.state_dir)
    try:
        diagnosis = _diagnosis(args.diagnosis)
        summary = _summary(args.validate_report)
        ready_at = _router_ready_at(args.validate_report)
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        return _fail(f"cannot read a report: {exc}", EXIT_USAGE)
    if args.cause:
        given = {"cause": args.cause, **({"detail": args.detail} if args.detail else {})}
        diagnosis = {**given, **(diagnosis or {})}
    downtime = args.downtime
    if args.down_since is not None and ready_at is not None:
        downtime = round(max(0.0, ready_at - args.down_since), 1)
    try:
        state = store.finish(args.attempt, args.outcome, diagnosis, downtime, summary)
    except StateError as exc:
        return _fail(str(exc))
    print(json.dumps(asdict(state.attempt(args.attempt)), indent=2))
    return EXIT_OK


def run_target(args: argparse.Namespace) -> int:
    store = StateStore(args.state_dir)
    try:
        state = store.read()
    except StateError as exc:
        return _fail(str(exc))
    candidates = state.known_good_states()
    index = args.index or 0
    if index < 0 or index >= len(candidates):
        return _fail(f"no known-good deployment #{index} (the node has {len(candidates)})")
    deployment = candidates[index]
    copy = store.topology_copy(deployment.topology_sha256)
    print(
        json.dumps({**asdict(deployment), "topology_copy": str(copy), "copy_exists": copy.exists()}, indent=2)
    )
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    """`status` and `state` alone: what `python3 -m sglnode.commands.state` parses."""
    from sglnode.cli import UsageParser  # noqa: PLC0415 - cli imports this module's register lazily

    parser = UsageParser(prog="sglnode", description=__doc__)
    register(parser.add_subparsers(dest="command", metavar="COMMAND", required=True))
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
