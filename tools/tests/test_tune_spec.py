"""The sweep spec: the demo's loads; unknown keys, wrong types and missing files are refused by path."""

import pytest
import yaml
from tune_helpers import DEMO, write_spec

from sglnode.tune.spec import SpecError, load_spec, parse_spec

MINIMAL = {"name": "t", "base": "x.yml"}


def problems(data):
    with pytest.raises(SpecError) as info:
        parse_spec(data)
    return info.value.problems


def test_the_demo_spec_loads_with_paths_relative_to_it():
    loaded = load_spec(DEMO / "sweep.yml")
    assert loaded.spec.runtime == "sim"
    assert loaded.resolve(loaded.spec.base) == DEMO / "tp4.yml"
    assert len(loaded.sha256) == 64


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ({"benchmark": {}}, "benchmark"),
        ({"slo": {"max_itl_p99": 100}}, "slo.max_itl_p99"),
        ({"axes": {"cuda_graph_max_bs": [64]}}, "axes.cuda_graph_max_bs"),
        ({"axes": {"speculative": [{"algorithm": "EAGLE", "steps": 3}]}}, "axes.speculative.0"),
    ],
)
def test_unknown_keys_are_refused_with_their_path(extra, where):
    found = problems({**MINIMAL, **extra})
    assert any(p.startswith(where) and "unknown key" in p for p in found), found


@pytest.mark.parametrize(
    ("extra", "where"),
    [
        ({"bench": {"concurrency": "1,8"}}, "bench.concurrency"),  # no coercion from strings
        ({"bench": {"num_requests": "16"}}, "bench.num_requests"),
        ({"axes": {"mem_fraction_static": [1.0]}}, "axes.mem_fraction_static.0"),
        ({"axes": {"chunked_prefill_size": [0]}}, "axes.chunked_prefill_size"),
        ({"axes": {"speculative": [True]}}, "axes.speculative.0"),
        ({"axes": {"nccl": {"Bad Name": {}}}}, "axes.nccl"),
        ({"axes": {"nccl": {"ok": {"NOT-AN-ENV": "1"}}}}, "axes.nccl"),
        ({"runtime": "docker"}, "runtime"),
        ({"name": "Has_Capitals"}, "name"),
        ({"nccl_measurements": {"file": "a.json", "band_bytes": [10, 1]}}, "nccl_measurements"),
        ({"slo": {"max_error_rate": 2}}, "slo.max_error_rate"),
    ],
)
def test_wrong_values_are_refused_with_their_path(extra, where):
    found = problems({**MINIMAL, **extra})
    assert any(p.startswith(where) for p in found), found


def test_every_problem_is_listed_at_once():
    found = problems({"base": "x", "bench": {"warmup": -1}, "surprise": 1})
    assert len(found) == 3  # name missing, warmup < 0, unknown key


def test_speculative_off_is_null_or_false():
    spec = parse_spec({**MINIMAL, "axes": {"speculative": [None, False, {"algorithm": "EAGLE"}]}})
    assert spec.axes.speculative[2].algorithm == "EAGLE"


def test_files_the_spec_names_must_exist(tmp_path):
    path = write_spec(tmp_path, kernel_audit="nowhere.json")
    with pytest.raises(SpecError, match="kernel_audit"):
        load_spec(path)
    bad = tmp_path / "bad.yml"
    bad.write_text(yaml.safe_dump(["not", "a", "mapping"]))
    with pytest.raises(SpecError, match="not a YAML mapping"):
        load_spec(bad)
