"""Winner selection under the SLO, the table, the JSON, the winning topology and its provenance."""

import io
import json
from pathlib import Path

import yaml
from tune_helpers import FakeDeployer, stage, write_spec

from sglnode.topology.check import check_topology
from sglnode.tune.campaign import plan_candidates, run_campaign
from sglnode.tune.results import pick_winner, score
from sglnode.tune.spec import SloSpec, load_spec
from sglnode.tune.sweep import compact_stage


def record(cid, stages, status="done", gpus=4):
    compact = [compact_stage(s, 5.0, Path("bench.json")) for s in stages]
    return {"id": cid, "label": cid, "status": status, "gpus": gpus, "stages": compact}


SLO = SloSpec(max_ttft_p99_ms=1000, max_itl_p99_ms=50)


def test_the_fastest_stage_within_the_slo_wins_not_the_fastest_overall():
    fast_but_slow_tokens = record("a", [stage(1, 100), stage(64, 5000, itl_p99=80)])
    steady = record("b", [stage(1, 90), stage(64, 3000, itl_p99=40)])
    winner = pick_winner([fast_but_slow_tokens, steady], SLO)
    assert winner["id"] == "b"
    assert winner["stage"]["concurrency"] == 64
    # a's best stage within the SLO is c=1 (100 tok/s): eligible, and the runner-up.
    assert winner["runner_up"] == {"id": "a", "label": "a", "value": 100.0}
    missed = score(record("c", [stage(8, 9000, ttft_p99=3000)]), SLO)
    assert missed["eligible"] is False and "TTFT P99 3000.0 ms > 1000 ms" in missed["misses"][0]


def test_errors_unfinished_and_interrupted_candidates_cannot_win():
    errors = record("a", [stage(8, 9000, errors=1)])
    interrupted = record("b", [stage(8, 8000)], status="interrupted")
    crashed = record("c", [], status="crashed")
    finished = record("d", [stage(8, 100)])
    assert pick_winner([errors, interrupted, crashed, finished], SLO)["id"] == "d"
    assert pick_winner([errors, interrupted, crashed], SLO) is None
    # over_budget stages are complete measurements of what ran: eligible.
    assert pick_winner([record("e", [stage(8, 50)], status="over_budget")], SLO)["id"] == "e"


def test_per_gpu_objective_and_ties_going_to_fewer_gpus():
    per_gpu = SloSpec(objective="output_tok_s_per_gpu")
    tp8 = record("tp8", [stage(8, 1000)], gpus=8)
    tp4 = record("tp4", [stage(8, 600)], gpus=4)
    assert pick_winner([tp8, tp4], per_gpu)["id"] == "tp4"
    assert pick_winner([tp8, tp4], SloSpec())["id"] == "tp8"
    same = [record("x8", [stage(8, 500)], gpus=8), record("x4", [stage(8, 500)], gpus=4)]
    assert pick_winner(same, SloSpec())["id"] == "x4"


def test_results_table_json_and_winner_topology_with_provenance(tmp_path):
    spec_path = write_spec(tmp_path)
    loaded = load_spec(spec_path)
    candidates, _, _ = plan_candidates(loaded)
    deployer = FakeDeployer(behaviour={"mem=0.35": "crash"}, speed={"spec=eagle-3": 300.0})
    deployer.labels = {c.id: c.label for c in candidates}
    out = io.StringIO()
    code, results = run_campaign(spec_path, tmp_path / "out", deployer=deployer, stdout=out)
    assert code == 0
    winner_id = next(c.id for c in candidates if c.label == "spec=eagle-3")
    assert results["winner"]["id"] == winner_id
    assert results["simulated"] is True
    text = out.getvalue()
    assert text.count("SIMULATED") >= 3  # banner, column header, closing banner
    assert f"{winner_id}" in text and "<- winner" in text
    assert "oom (phase kv_cache)" in text

    saved = json.loads((tmp_path / "out" / "results.json").read_text())
    assert saved["winner"]["id"] == winner_id
    assert saved["outputs"]["winner"].endswith("winner.yml")
    assert (tmp_path / "out" / "results.md").read_text().startswith("*** SIMULATED")

    winner_text = (tmp_path / "out" / "winner.yml").read_text()
    assert winner_text.startswith("# SIMULATED")
    topology = yaml.safe_load(winner_text)
    assert topology["name"] == "demo-winner"
    assert topology["servers"][0]["speculative"]["algorithm"] == "EAGLE"
    _, problems = check_topology(topology)
    assert problems == []  # the winner is a topology the roles can deploy
    provenance = json.loads((tmp_path / "out" / "winner.json").read_text())
    assert provenance["candidate"] == winner_id
    assert provenance["spec_sha256"] == loaded.sha256
    assert provenance["figures"]["concurrency"] == 8
    assert provenance["figures"]["output_tok_s"] == 2400.0
    assert provenance["simulated"] is True
    assert provenance["results_file"].endswith("results.json")


def test_no_winner_exits_1_and_writes_no_winner_file(tmp_path):
    spec_path = write_spec(tmp_path, slo={"max_itl_p99_ms": 1})
    deployer = FakeDeployer()
    code, results = run_campaign(spec_path, tmp_path / "out", deployer=deployer, stdout=io.StringIO())
    assert code == 1
    assert results["winner"] is None
    assert not (tmp_path / "out" / "winner.yml").exists()
    assert "winner: none" in (tmp_path / "out" / "results.md").read_text()
