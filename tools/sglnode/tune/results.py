"""The sweep's answer: the winner under the SLO, a table, JSON, a plot, and the winning topology file.

A stage meets the SLO when its error rate, TTFT p99 and ITL p99 are within the limits; a candidate's
score is its best objective over the stages that meet it (output tok/s, or per GPU). Only candidates
that ran to the end of their bench (done) or of their budget (over_budget) can win; an interrupted
candidate's partial stages are shown but never chosen. Ties go to fewer GPUs, then lower ITL p99.

Results from the simulated node are labelled SIMULATED everywhere: the table's banner and column
header, the JSON's `simulated`, the plot's title and the winning topology's header.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from sglnode import __version__
from sglnode.tune.spec import LoadedSpec, SloSpec
from sglnode.tune.sweep import write_json_atomic

RESULTS_SCHEMA = 1
SIMULATED_BANNER = (
    "SIMULATED: the servers were `sglnode sim`, a test double of SGLang. Every figure here describes "
    "the simulator on this machine, not SGLang and not the GPU node."
)
ELIGIBLE = ("done", "over_budget")
OBJECTIVE_UNITS = {"output_tok_s": "output tok/s", "output_tok_s_per_gpu": "output tok/s per GPU"}


def stage_misses(stage: dict[str, Any], slo: SloSpec) -> list[str]:
    """Why a stage misses the SLO (empty when it meets it)."""
    misses = []
    if not stage.get("requests_ok"):
        return ["no request completed"]
    if (stage.get("error_rate") or 0.0) > slo.max_error_rate:
        misses.append(f"error rate {stage['error_rate']:.1%} > {slo.max_error_rate:.1%}")
    for key, limit in (("ttft_p99_ms", slo.max_ttft_p99_ms), ("itl_p99_ms", slo.max_itl_p99_ms)):
        value = stage.get(key)
        if limit is not None and (value is None or value > limit):
            shown = "n/a" if value is None else f"{value:.1f}"
            misses.append(f"{key.replace('_ms', '').replace('_', ' ').upper()} {shown} ms > {limit:g} ms")
    return misses


def objective(stage: dict[str, Any], gpus: int, slo: SloSpec) -> float:
    value = float(stage.get("output_tok_s") or 0.0)
    return value / max(gpus, 1) if slo.objective == "output_tok_s_per_gpu" else value


def score(record: dict[str, Any], slo: SloSpec) -> dict[str, Any]:
    """{eligible, value, stage, misses}: the candidate's best stage under the SLO."""
    stages = record.get("stages") or []
    meeting = [s for s in stages if not stage_misses(s, slo)]
    gpus = int(record.get("gpus") or 0)
    if meeting:
        best = max(meeting, key=lambda s: objective(s, gpus, slo))
        return {
            "eligible": record.get("status") in ELIGIBLE,
            "value": objective(best, gpus, slo),
            "stage": best,
            "misses": [],
        }
    best = max(stages, key=lambda s: objective(s, gpus, slo)) if stages else None
    return {
        "eligible": False,
        "value": None,
        "stage": best,
        "misses": stage_misses(best, slo) if best else [],
    }


def pick_winner(records: list[dict[str, Any]], slo: SloSpec) -> dict[str, Any] | None:
    scored = [(r, score(r, slo)) for r in records]
    eligible = [(r, s) for r, s in scored if s["eligible"]]
    if not eligible:
        return None
    eligible.sort(
        key=lambda pair: (
            -pair[1]["value"],
            int(pair[0].get("gpus") or 0),
            pair[1]["stage"].get("itl_p99_ms") or 0.0,
            pair[0]["id"],
        )
    )
    record, best = eligible[0]
    runner_up = eligible[1] if len(eligible) > 1 else None
    return {
        "id": record["id"],
        "label": record["label"],
        "value": best["value"],
        "stage": best["stage"],
        "runner_up": (
            {"id": runner_up[0]["id"], "label": runner_up[0]["label"], "value": runner_up[1]["value"]}
            if runner_up
            else None
        ),
    }


def build_results(
    loaded: LoadedSpec,
    state: dict[str, Any],
    order: list[str],
    nccl: dict[str, Any] | None,
    notes: list[str],
    *,
    state_file: str | None = None,
    interrupted_by: int | None = None,
    aborted: str | None = None,
) -> dict[str, Any]:
    spec = loaded.spec
    records = [state["candidates"][cid] for cid in order if cid in state["candidates"]]
    for record in records:
        record["score"] = score(record, spec.slo)
    simulated = spec.runtime == "sim" or any(r.get("simulated") for r in records)
    not_run = [cid for cid in order if cid not in state["candidates"]]
    return {
        "schema": RESULTS_SCHEMA,
        "sweep": spec.name,
        "description": spec.description,
        "simulated": simulated,
        "runtime": spec.runtime,
        "spec_file": str(loaded.path),
        "spec_sha256": loaded.sha256,
        "state_file": state_file,
        "sglnode": __version__,
        "written": datetime.now(UTC).isoformat(timespec="seconds"),
        "complete": not not_run and interrupted_by is None and aborted is None,
        "interrupted_by_signal": interrupted_by,
        "aborted": aborted,
        "not_run": not_run,
        "notes": notes,
        "slo": spec.slo.model_dump(),
        "bench": spec.bench.model_dump(),
        "budget": spec.budget.model_dump(),
        "nccl": nccl,
        "candidates": records,
        "winner": pick_winner(records, spec.slo),
    }


def _num(value: Any, digits: int = 1) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def slo_text(slo: SloSpec) -> str:
    parts = [f"errors <= {slo.max_error_rate:.0%}"]
    if slo.max_ttft_p99_ms is not None:
        parts.append(f"TTFT p99 <= {slo.max_ttft_p99_ms:g} ms")
    if slo.max_itl_p99_ms is not None:
        parts.append(f"ITL p99 <= {slo.max_itl_p99_ms:g} ms")
    return ", ".join(parts) + f"; objective {slo.objective}"


def render_table(results: dict[str, Any], slo: SloSpec) -> str:
    simulated = results["simulated"]
    tag = " [SIMULATED]" if simulated else ""
    lines = []
    if simulated:
        lines += [f"*** {SIMULATED_BANNER} ***", ""]
    lines.append(
        f"sweep {results['sweep']}: {len(results['candidates'])} candidate(s); SLO: {slo_text(slo)}"
        + ("" if results["complete"] else "  (INCOMPLETE: partial results)")
    )
    header = (
        f"{'#':>2}  {'id':<10}  {'candidate':<34}  {'status':<15}  {'GPUs':>4}  {'best c':>6}  "
        f"{'out tok/s' + tag:>{9 + len(tag)}}  {'TTFT p99':>9}  {'ITL p99':>8}  {'err %':>5}  SLO"
    )
    lines += [header, "-" * len(header)]
    details = []
    winner = (results.get("winner") or {}).get("id")
    for record in results["candidates"]:
        scored = record.get("score") or {}
        stage = scored.get("stage") or {}
        if record["status"] in ("done", "over_budget", "interrupted") and stage:
            slo_col = "met" if not scored.get("misses") else "missed"
        else:
            slo_col = "-"
        mark = " <- winner" if record["id"] == winner else ""
        error = stage.get("error_rate")
        lines.append(
            f"{record.get('index', 0):>2}  {record['id']:<10}  {record['label'][:34]:<34}  "
            f"{record['status']:<15}  {record.get('gpus', 0):>4}  {stage.get('concurrency') or '-':>6}  "
            f"{_num(stage.get('output_tok_s')):>{9 + len(tag)}}  {_num(stage.get('ttft_p99_ms')):>9}  "
            f"{_num(stage.get('itl_p99_ms')):>8}  {_num(None if error is None else error * 100):>5}  "
            f"{slo_col}{mark}"
        )
        details += _detail(record, scored)
    if details:
        lines += ["", *details]
    lines.append("")
    win = results.get("winner")
    if win:
        stage = win["stage"]
        lines.append(
            f"winner: {win['id']} ({win['label']}): {win['value']:.1f} {OBJECTIVE_UNITS[slo.objective]} "
            f"at concurrency {stage['concurrency']}, TTFT p99 {_num(stage.get('ttft_p99_ms'))} ms, "
            f"ITL p99 {_num(stage.get('itl_p99_ms'))} ms{tag}"
        )
    else:
        lines.append("winner: none (no finished candidate met the SLO)")
    if simulated:
        lines += ["", f"*** {SIMULATED_BANNER} ***"]
    return "\n".join(lines) + "\n"


def _detail(record: dict[str, Any], scored: dict[str, Any]) -> list[str]:
    head = f"  {record['id']} {record['status']}:"
    wait = record.get("wait") or {}
    diagnosis = wait.get("diagnosis")
    if diagnosis:
        phase = f" (phase {diagnosis['phase']})" if diagnosis.get("phase") else ""
        out = [f"{head} {wait.get('failed_server')}: {diagnosis.get('cause')}{phase}"]
        out += [f"      evidence: {line}" for line in diagnosis.get("evidence") or []][:2]
        if diagnosis.get("fix"):
            out.append(f"      fix: {diagnosis['fix']}")
        return out
    if record.get("reasons"):
        return [f"{head} {reason}" for reason in record["reasons"][:3]]
    if scored.get("misses"):
        return [f"{head} SLO missed at its best stage: {'; '.join(scored['misses'])}"]
    return [f"{head} {note}" for note in record.get("notes") or []][:2]


def plot_results(results: dict[str, Any], slo: SloSpec, path: Path) -> bool:
    """Output tok/s and ITL p99 against concurrency per candidate; False when matplotlib is absent."""
    try:
        import matplotlib  # noqa: PLC0415 - plotting is optional

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt  # noqa: PLC0415
    except ImportError:
        return False
    fig, (ax_tput, ax_itl) = plt.subplots(1, 2, figsize=(13, 4.8))
    winner = (results.get("winner") or {}).get("id")
    for record in results["candidates"]:
        stages = sorted(record.get("stages") or [], key=lambda s: s["concurrency"] or 0)
        if not stages:
            continue
        xs = [s["concurrency"] for s in stages]
        width = 2.6 if record["id"] == winner else 1.2
        label = f"{record['id'][:6]} {record['label'][:28]}" + (" (winner)" if record["id"] == winner else "")
        ax_tput.plot(xs, [s["output_tok_s"] for s in stages], marker="o", linewidth=width, label=label)
        ax_itl.plot(xs, [s["itl_p99_ms"] for s in stages], marker="o", linewidth=width, label=label)
    if slo.max_itl_p99_ms is not None:
        ax_itl.axhline(slo.max_itl_p99_ms, color="red", linestyle="--", label="SLO ITL p99")
    for axis, ylabel in ((ax_tput, "output tok/s"), (ax_itl, "ITL p99 (ms)")):
        axis.set_xlabel("concurrency")
        axis.set_ylabel(ylabel)
        axis.set_xscale("log", base=2)
        axis.legend(fontsize="x-small")
    title = f"sglnode tune: sweep {results['sweep']}"
    if results["simulated"]:
        title += "  --  SIMULATED (sglnode sim, a test double): NOT A MEASUREMENT OF SGLANG"
    fig.suptitle(title, color="red" if results["simulated"] else "black")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return True


def winner_topology(results: dict[str, Any], loaded: LoadedSpec) -> tuple[str, dict[str, Any]] | None:
    """(YAML text, provenance) of the winning topology, or None without a winner."""
    win = results.get("winner")
    if not win:
        return None
    spec = loaded.spec
    record = next(r for r in results["candidates"] if r["id"] == win["id"])
    data = dict(record["topology"])
    data["name"] = spec.winner_name or f"{spec.name}-winner"
    data["description"] = f"winner of sweep {spec.name} (candidate {record['id']}: {record['label']})"
    stage = win["stage"]
    provenance = {
        "sweep": spec.name,
        "simulated": results["simulated"],
        "spec_file": results["spec_file"],
        "spec_sha256": results["spec_sha256"],
        "results_file": results.get("results_file"),
        "candidate": record["id"],
        "label": record["label"],
        "source_topology": record["source"],
        "overrides": record["overrides"],
        "measured": {"started": record.get("started"), "finished": record.get("finished")},
        "slo": results["slo"],
        "objective": {"name": spec.slo.objective, "value": win["value"]},
        "figures": stage,
        "runner_up": win.get("runner_up"),
        "sglnode": results["sglnode"],
        "images": spec.images.model_dump(),
    }
    header = [
        f"# Winner of tuning sweep {spec.name}: candidate {record['id']} ({record['label']}).",
        f"# Spec {results['spec_file']} (sha256 {results['spec_sha256'][:16]}), results "
        f"{results.get('results_file')}.",
        f"# Figures at concurrency {stage['concurrency']}: {stage['output_tok_s']:.1f} output tok/s, "
        f"TTFT p99 {_num(stage.get('ttft_p99_ms'))} ms, ITL p99 {_num(stage.get('itl_p99_ms'))} ms, "
        f"error rate {stage.get('error_rate') or 0:.1%}; SLO: {slo_text(spec.slo)}.",
        f"# Measured {record.get('started')} .. {record.get('finished')}; provenance in winner.json.",
    ]
    if results["simulated"]:
        header.insert(0, f"# {SIMULATED_BANNER}")
        header.insert(
            1, "# SIMULATED: do not deploy this file as a tuned result; rerun the sweep on the node."
        )
    text = "\n".join(header) + "\n" + yaml.safe_dump(data, sort_keys=False)
    return text, provenance


def write_outputs(results: dict[str, Any], loaded: LoadedSpec, out_dir: Path) -> dict[str, str | None]:
    """results.json, results.md (the table), results.png (when matplotlib is there), winner.yml/json."""
    slo = loaded.spec.slo
    results["results_file"] = str(out_dir / "results.json")
    table = render_table(results, slo)
    (out_dir / "results.md").write_text(table, encoding="utf-8")
    plotted = plot_results(results, slo, out_dir / "results.png")
    paths: dict[str, str | None] = {
        "results": str(out_dir / "results.json"),
        "table": str(out_dir / "results.md"),
        "plot": str(out_dir / "results.png") if plotted else None,
        "winner": None,
    }
    winner = winner_topology(results, loaded)
    for stale in ("winner.yml", "winner.json"):
        (out_dir / stale).unlink(missing_ok=True)
    if winner is not None:
        text, provenance = winner
        (out_dir / "winner.yml").write_text(text, encoding="utf-8")
        write_json_atomic(out_dir / "winner.json", provenance)
        paths["winner"] = str(out_dir / "winner.yml")
    results["outputs"] = paths
    write_json_atomic(out_dir / "results.json", results)
    return paths
