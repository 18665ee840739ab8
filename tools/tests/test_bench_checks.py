from pathlib import Path

import pytest
import yaml

from sglnode.bench.checks import Targets, evaluate, parse_threshold, unchecked
from sglnode.rollout import aggregate_plan, targets_from_settings
from sglnode.topology.check import check_topology
from sglnode.topology.model import read_topology_file


def _stage(**overrides):
    stage = {
        "label": "c=8",
        "requests": {"ok": 10, "error_rate": 0.0, "errors_by_reason": {}},
        "aborted": None,
        "output_tok_s": 1000.0,
        "ttft_ms": {"p99": 50.0},
        "itl_ms": {"p99": 20.0},
    }
    stage.update(overrides)
    return stage


def test_a_stage_within_every_target_passes():
    targets = Targets(min_output_tok_s=900, max_ttft_p99_ms=60, max_itl_p99_ms=25)
    assert evaluate([_stage()], targets) == []


def test_each_missed_target_is_named():
    targets = Targets(min_output_tok_s=2000, max_ttft_p99_ms=40, max_itl_p99_ms=10)
    failures = evaluate([_stage()], targets)
    assert len(failures) == 3
    assert all(f.startswith("c=8: ") for f in failures)


def test_errors_above_the_budget_fail_with_their_reasons():
    stage = _stage(requests={"ok": 9, "error_rate": 0.1, "errors_by_reason": {"http_503": 1}})
    assert evaluate([stage], Targets()) == ["c=8: error rate 10.0% > 0.0% (http_503 x1)"]
    assert evaluate([stage], Targets(max_error_rate=0.1)) == []


def test_no_success_and_abort_always_fail():
    stage = _stage(
        requests={"ok": 0, "error_rate": 1.0, "errors_by_reason": {"connect_failed": 3}}, aborted="gone"
    )
    failures = evaluate([stage], Targets(max_error_rate=1.0))
    assert failures == ["c=8: aborted: gone", "c=8: no request succeeded"]


def test_a_lost_client_worker_fails_the_stage():
    failures = evaluate([_stage(lost_workers=1)], Targets())
    assert failures == ["c=8: 1 client worker(s) died; their results are lost"]


# --- issue 13: targets per concurrency --------------------------------------------------------
REPO = Path(__file__).resolve().parents[2]


def _sweep(*tok_s_by_c):
    return [{**_stage(output_tok_s=v), "label": f"c={c}", "concurrency": c} for c, v in tok_s_by_c]


def test_one_number_applies_to_every_stage_so_300_fails_at_concurrency_1():
    # The planner's c=1 roofline for the default topology is ~206 tok/s: 300 can never be met there.
    stages = _sweep((1, 205.0), (4, 600.0), (16, 1200.0))
    failures = evaluate(stages, Targets(min_output_tok_s=300.0))
    assert failures == ["c=1: output 205 tok/s < 300"]


def test_per_concurrency_targets_check_each_stage_against_its_own_number():
    stages = _sweep((1, 150.0), (4, 290.0), (16, 1200.0))
    targets = Targets(min_output_tok_s=parse_threshold("1:100,4:300,16:600", "--min-output-tok-s"))
    assert evaluate(stages, targets) == ["c=4: output 290 tok/s < 300"]


def test_a_stage_without_a_per_concurrency_target_is_named_not_silently_passed():
    stages = _sweep((1, 150.0), (8, 10.0))
    targets = Targets(min_output_tok_s={1.0: 100.0, 4.0: 300.0})
    assert evaluate(stages, targets) == []
    assert unchecked(targets, stages) == [
        "c=8: no min_output_tok_s target for this stage; not checked",
        "min_output_tok_s: the target for 4 matches no stage of this run",
    ]


@pytest.mark.parametrize("text", ["nan", "inf", "-1", "0", "1:", "x:3", "1:nan", ":"])
def test_bad_thresholds_are_refused(text):
    with pytest.raises(ValueError):
        parse_threshold(text, "--min-output-tok-s")


def test_the_roles_default_targets_are_reachable_by_the_planners_own_roofline():
    defaults = yaml.safe_load((REPO / "roles/sglang_validate/defaults/main.yml").read_text())
    sweep = [int(c) for c in defaults["sglang_validate_concurrency"].split(",")]
    targets = targets_from_settings(defaults["sglang_validate_targets"])
    topology, problems = check_topology(read_topology_file(REPO / "inventory/topologies/pd-1p1d.yml"))
    assert not problems
    plan = aggregate_plan(topology, "rtx-pro-6000-blackwell", sweep)
    roofline = {p["concurrency"]: p["decode_tok_s"] for p in plan["roofline"]}
    assert isinstance(targets.min_output_tok_s, dict)
    assert sorted(targets.min_output_tok_s) == sweep  # every stage of the default sweep is checked
    for concurrency, floor in targets.min_output_tok_s.items():
        # at most 60 % of an upper bound: reachable by a healthy node, not by a broken one
        assert floor <= 0.6 * roofline[concurrency], (concurrency, floor, roofline[concurrency])
