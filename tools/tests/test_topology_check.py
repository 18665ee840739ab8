"""The topology validator: shipped topologies pass; each bad input is rejected naming server and field."""

import copy
import re
from pathlib import Path

import pytest
import yaml

from sglnode.pins import PINS
from sglnode.topology import check_topology, read_topology_file
from sglnode.topology.flags import load_catalog

REPO = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures" / "topology"
SHIPPED = sorted((REPO / "inventory" / "topologies").glob("*.yml"))
BASE = read_topology_file(FIXTURES / "base-pd.yml")
CASES = yaml.safe_load((FIXTURES / "bad-cases.yml").read_text())


def _walk(data, parts):
    for part in parts:
        data = data[int(part)] if isinstance(data, list) else data.setdefault(part, {})
    return data


PIN_TOKEN = re.compile(r"<pin:([\w.]+)>")


def pin_value(value):
    """A "<pin:KEY>" set value: the pinned value itself (an int for a port)."""
    if isinstance(value, str) and (match := PIN_TOKEN.fullmatch(value)):
        return PINS.get(match.group(1))
    return value


def pin_regex(message):
    """An expected message with its "<pin:KEY>" tokens replaced by the pinned values (escaped)."""
    return PIN_TOKEN.sub(lambda match: re.escape(str(PINS.get(match.group(1)))), message)


def patched(case):
    data = copy.deepcopy(BASE)
    for path in case.get("delete", []):
        *parent, last = path.split(".")
        del _walk(data, parent)[last if not last.isdigit() else int(last)]
    for path, value in case.get("set", {}).items():
        # Only split on dots between known path parts, so keys like "--enable-x" survive.
        *parent, last = path.split(".")
        target = _walk(data, parent)
        target[int(last) if isinstance(target, list) else last] = pin_value(value)
    return data


def test_shipped_topologies_are_the_five_the_issue_names():
    assert {p.stem for p in SHIPPED} == {"tp8", "tp4x2", "pd-1p1d", "tp4-mtp", "multinode-pd"}


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_topology_is_valid(path):
    topology, problems = check_topology(read_topology_file(path))
    assert problems == []
    assert topology.name == path.stem


def test_base_fixture_is_valid_so_each_case_fails_for_its_own_reason():
    assert check_topology(copy.deepcopy(BASE))[1] == []


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_bad_input_is_rejected_naming_server_and_field(case):
    _, problems = check_topology(patched(case))
    expect = case["expect"]
    matching = [
        p
        for p in problems
        if p.where == expect["where"] and re.search(pin_regex(expect["message"]), p.message)
    ]
    assert matching, f"expected {expect}, got {[str(p) for p in problems]}"


def test_every_problem_is_listed_not_only_the_first():
    data = patched({"set": {"servers.0.mem_fraction_static": 1.5, "servers.1.gpus": [0, 5, 6, 7]}})
    data["servers"][1]["args"] = {"cuda_graph_max_bs": 8}
    wheres = {p.where for p in check_topology(data)[1]}
    assert {
        "server prefill0.mem_fraction_static",
        "server decode0.gpus",
        "server decode0.args.cuda_graph_max_bs",
    } <= wheres


def test_server_defaults_merge_args_instead_of_replacing_them():
    data = copy.deepcopy(BASE)
    data["servers"][0]["args"] = {"log_level": "info"}
    topology, problems = check_topology(data)
    assert problems == []
    assert topology.servers[0].args == {"enable_metrics": True, "log_level": "info"}
    assert topology.servers[1].args == {"enable_metrics": True}


def test_flag_catalog_knows_aliases_and_the_pinned_replacements():
    catalog = load_catalog()
    assert catalog.version == PINS.sglang  # regenerate sglang_flags.yaml after a bump
    assert catalog.lookup("--tensor-parallel-size").name == "--tp-size"
    assert catalog.lookup("cuda_graph_max_bs_decode") is not None
    assert catalog.lookup("--cuda-graph-max-bs") is None
    assert catalog.removed["--cuda-graph-max-bs"]["replacement"] == "--cuda-graph-max-bs-decode"
    for removed in catalog.removed.values():
        assert catalog.lookup(removed["replacement"]) is not None
    assert "nixl" in catalog.choices("--disaggregation-transfer-backend")


def test_deprecated_flag_is_refused_with_its_replacement():
    data = copy.deepcopy(BASE)
    data["servers"][1]["args"] = {"disable_cuda_graph": True}
    messages = [p.message for p in check_topology(data)[1]]
    assert any("deprecated" in m and "--cuda-graph-backend" in m for m in messages)
