"""`sglnode topology check|render`: exit codes, every problem printed, files written as the role would."""

import json
import stat
from pathlib import Path

import yaml

from sglnode.cli import main
from sglnode.topology import RenderOptions, check_topology, read_topology_file, render

REPO = Path(__file__).resolve().parents[2]
PD = REPO / "inventory" / "topologies" / "pd-1p1d.yml"


def write_topology(tmp_path, mutate):
    data = read_topology_file(PD)
    mutate(data)
    path = tmp_path / "topology.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_check_valid_topology_exits_zero_with_memory_verdicts(capsys):
    assert main(["topology", "check", str(PD), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["valid"] is True and result["problems"] == []
    assert [v["server"] for v in result["memory"]] == ["prefill0", "decode0"]
    assert all(v["fits"] for v in result["memory"])


def test_check_lists_every_problem_and_exits_one(tmp_path, capsys):
    def mutate(data):
        data["servers"][1]["gpus"] = [3, 4, 5, 6]
        data["servers"][0]["mem_fraction_static"] = 0.99

    assert main(["topology", "check", str(write_topology(tmp_path, mutate))]) == 1
    out = capsys.readouterr().out
    assert "2 problem(s)" in out
    assert "server decode0.gpus: GPU 3 on node local is also used by prefill0" in out
    assert "server prefill0.mem_fraction_static: 0.99 is outside (0, 0.98]" in out


def test_check_refuses_a_server_the_memory_preflight_says_does_not_fit(tmp_path, capsys):
    def mutate(data):
        # One GPU cannot hold a 146 GB checkpoint: the planner fails it in the weights phase.
        data.pop("server_defaults")
        data["servers"] = [{"name": "tiny", "gpus": [0], "tp": 1, "port": 30001, "mem_fraction_static": 0.85}]

    assert main(["topology", "check", str(write_topology(tmp_path, mutate)), "--json"]) == 1
    result = json.loads(capsys.readouterr().out)
    assert result["problems"][0]["where"] == "server tiny.mem_fraction_static"
    assert result["memory"][0]["failure_phase"] == "weights"
    assert main(["topology", "check", str(write_topology(tmp_path, mutate)), "--no-memory"]) == 0


def test_check_unreadable_file_exits_two(tmp_path, capsys):
    path = tmp_path / "list.yml"
    path.write_text("- just a list\n")
    assert main(["topology", "check", str(path)]) == 2
    assert "not a YAML mapping" in capsys.readouterr().err


def test_render_writes_exactly_what_render_returns_with_modes(tmp_path):
    out = tmp_path / "out"
    assert (
        main(
            [
                "topology",
                "render",
                str(PD),
                "--out",
                str(out),
                "--runtime",
                "sim",
                "--bind-address",
                "10.9.8.7",
            ]
        )
        == 0
    )
    expected = render(
        check_topology(read_topology_file(PD))[0], RenderOptions(runtime="sim", bind_address="10.9.8.7")
    )
    for f in expected:
        target = out / f.path
        assert target.read_text() == f.content
        assert stat.S_IMODE(target.stat().st_mode) == int(f.mode, 8)
    written = {str(p.relative_to(out)) for p in out.rglob("*") if p.is_file()}
    assert written == {f.path for f in expected} | {".sglnode-render.json"}
    manifest = json.loads((out / ".sglnode-render.json").read_text())
    assert set(manifest["files"]) == {f.path for f in expected}


def test_render_refuses_invalid_topology_and_writes_nothing(tmp_path, capsys):
    def mutate(data):
        data["servers"][0]["args"] = {"cuda_graph_max_bs": 64}

    out = tmp_path / "out"
    assert main(["topology", "render", str(write_topology(tmp_path, mutate)), "--out", str(out)]) == 1
    assert "use --cuda-graph-max-bs-decode" in capsys.readouterr().err
    assert not out.exists()


def test_render_unknown_node_is_refused(tmp_path):
    out = tmp_path / "out"
    assert main(["topology", "render", str(PD), "--out", str(out), "--node", "elsewhere"]) == 1
    assert not out.exists()
