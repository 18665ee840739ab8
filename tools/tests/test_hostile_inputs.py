"""Hostile input to `sglnode topology check|render` and `sglnode plan`: a message and a documented exit
code, never a traceback, never a partial set of files (issue 16). Cases run the CLI's `main()` in
process (an uncaught exception fails the test) and, for a sample, the real CLI in a subprocess, where
an uncaught exception shows as "Traceback" on stderr and a hang as a timeout."""

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from sglnode.cli import main
from sglnode.topology import check_topology, read_topology_file, render
from sglnode.topology import write as writer

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "inventory" / "topologies"
PD = TOPOLOGIES / "pd-1p1d.yml"
CLI_TIMEOUT_S = 60
# A bounded loader refuses these in well under a second; the old one took minutes and gigabytes.
REFUSAL_BUDGET_S = 10

ALIAS_BOMB = "\n".join(
    ["a: &a [x, x, x, x, x, x, x, x, x]"]
    + [f"{chr(98 + i)}: &{chr(98 + i)} [" + ", ".join([f"*{chr(97 + i)}"] * 9) + "]" for i in range(8)]
    + ["name: bomb"]
)


def run_cli(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(REPO / "tools")}
    started = time.monotonic()
    result = subprocess.run(
        [sys.executable, "-m", "sglnode", *args],
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT_S,
        env=env,
        cwd=cwd,
        check=False,
    )
    return result, time.monotonic() - started


def run_main(capsys, *args):
    """main() in process: (exit code, stdout, stderr, seconds); argparse's exits count as codes."""
    capsys.readouterr()
    started = time.monotonic()
    try:
        code = main(list(args))
    except SystemExit as exc:
        code = exc.code
    captured = capsys.readouterr()
    return code, captured.out, captured.err, time.monotonic() - started


def pd_with(mutate):
    data = read_topology_file(PD)
    mutate(data)
    return yaml.safe_dump(data)


def write_file(tmp_path, content, name="topology.yml"):
    path = tmp_path / name
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def _set(path, value):
    def mutate(data):
        target = data
        *parents, last = path
        for part in parents:
            target = target[part]
        target[last] = value

    return mutate


# (id, file content, exit code of check, message fragment)
TOPOLOGY_CASES = [
    ("alias-bomb", ALIAS_BOMB, 2, "expands to more than 100000 YAML nodes"),
    ("binary", b"\x7fELF\x02\x01\x01\x00\x00\x00", 2, "is binary (it contains NUL bytes)"),
    ("latin-1", "name: caf\u00e9\n".encode("latin-1"), 2, "is not UTF-8 text (byte 0xe9 at offset 9)"),
    ("too-large", "# " + "x" * (1 << 20) + "\nname: big\n", 2, "more than the 1.0 MiB a topology may be"),
    ("deep-nesting", "a: " + "[" * 200 + "]" * 200 + "\n", 2, "nests deeper than 32 levels"),
    ("duplicate-key", "name: a\nname: b\n", 2, "the key 'name' is given twice"),
    ("python-tag", "name: !!python/object/apply:os.system [true]\n", 2, "could not determine a constructor"),
    ("huge-integer", "name: x\nservers: [{tp: " + "9" * 5000 + "}]\n", 2, "cannot be read"),
    ("a-list", "- a\n- b\n", 2, "is not a YAML mapping"),
    ("empty", "", 2, "is not a YAML mapping"),
    ("bad-yaml", "name: [unclosed\n", 2, "is not valid YAML (line 2"),
    (
        "typo-mem-fraction",
        pd_with(_set(["servers", 0, "mem_fracton_static"], 0.8)),
        1,
        "did you mean 'mem_fraction_static'",
    ),
    (
        "typo-kv-dtype",
        pd_with(_set(["servers", 1, "kv_cache_dtpye"], "fp8_e4m3")),
        1,
        "did you mean 'kv_cache_dtype'",
    ),
    ("typo-router", pd_with(lambda d: d.update(routr=d.pop("router"))), 1, "did you mean 'router'"),
    (
        "tp3-of-64-heads",
        pd_with(lambda d: d["servers"][0].update(gpus=[0, 1, 2], tp=3)),
        1,
        "tp 3 does not divide",
    ),
    (
        "infinite-number",
        pd_with(_set(["servers", 0, "mem_fraction_static"], float("inf"))),
        1,
        "finite number",
    ),
    (
        "env-line-injection",
        pd_with(_set(["servers", 0, "env"], {"A": "1\nLD_PRELOAD=/x.so"})),
        1,
        "control character",
    ),
    (
        "too-many-servers",
        pd_with(lambda d: d.update(servers=[{"name": f"s{i}"} for i in range(300)])),
        1,
        "more than 256",
    ),
]


@pytest.mark.parametrize(
    ("content", "code", "fragment"), [c[1:] for c in TOPOLOGY_CASES], ids=[c[0] for c in TOPOLOGY_CASES]
)
def test_hostile_topology_is_refused_with_a_message(tmp_path, capsys, content, code, fragment):
    path = write_file(tmp_path, content)
    exit_code, out, err, elapsed = run_main(capsys, "topology", "check", str(path))
    assert exit_code == code, out + err
    assert fragment in out + err
    assert elapsed < REFUSAL_BUDGET_S
    target = tmp_path / "out"
    exit_code, _, err, _ = run_main(capsys, "topology", "render", str(path), "--out", str(target))
    assert exit_code == code
    assert fragment in err
    assert not target.exists()  # nothing written, not even the directory


@pytest.mark.parametrize("case", ["alias-bomb", "binary", "typo-router"])
def test_the_real_cli_prints_no_traceback(tmp_path, case):
    _, content, code, fragment = next(c for c in TOPOLOGY_CASES if c[0] == case)
    path = write_file(tmp_path, content)
    result, elapsed = run_cli("topology", "check", str(path))
    assert result.returncode == code and fragment in result.stdout + result.stderr
    assert "Traceback" not in result.stdout + result.stderr
    assert elapsed < CLI_TIMEOUT_S


def test_a_directory_or_a_missing_file_is_unreadable(tmp_path, capsys):
    for target, fragment in ((tmp_path, "it is a directory"), (tmp_path / "nope.yml", "No such file")):
        code, _, err, _ = run_main(capsys, "topology", "check", str(target))
        assert code == 2 and fragment in err


# --- plan: out-of-range numbers are usage errors (64), never negative tokens or a traceback --------------
NEGATIVE_LAYERS = {
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 8192,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "num_hidden_layers": -80,
}
PLAN_CASES = [
    ("bandwidth-zero", ["--gpu-bw-tbs", "0"], "--gpu-bw-tbs: must be a finite number in (0, 1000]"),
    ("bandwidth-negative", ["--gpu-bw-tbs", "-1.8"], "--gpu-bw-tbs: must be a finite number"),
    ("bandwidth-nan", ["--gpu-bw-tbs", "nan"], "--gpu-bw-tbs: must be a finite number"),
    ("memory-inf", ["--gpu-mem-gb", "inf"], "--gpu-mem-gb: must be a finite number"),
    ("context-negative", ["--context-length", "-4096"], "--context-length: must be 1..1073741824, got -4096"),
    ("roofline-context-zero", ["--roofline-context", "0"], "--roofline-context: must be 1..1073741824"),
    ("tp-zero", ["--tp", "0"], "--tp: must be 1..4096, got 0"),
    ("tp5-of-64-heads", ["--tp", "5"], "tp 5 does not divide deepseek-v4-flash-fp4's 64 attention heads"),
    ("tp3-of-64-heads", ["--tp", "3"], "tp 3 does not divide"),
    (
        "fraction-one",
        ["--mem-fraction-static", "1"],
        "--mem-fraction-static: must be a finite number in (0, 1)",
    ),
    ("weights-negative", ["--weights-gb", "-146"], "--weights-gb: must be a finite number"),
    ("concurrency-zero", ["--concurrency", "0,4"], "concurrency values must be in 1.."),
    ("preset-path", ["--gpu", "../../../etc/passwd"], "unknown GPU preset"),
]


@pytest.mark.parametrize(("extra", "fragment"), [c[1:] for c in PLAN_CASES], ids=[c[0] for c in PLAN_CASES])
def test_plan_refuses_out_of_range_numbers_as_bad_input(capsys, extra, fragment):
    code, out, err, _ = run_main(capsys, "plan", "--model", "deepseek-v4-flash-fp4", "--tp", "4", *extra)
    assert code == 64, out + err
    assert fragment in err
    assert out == ""  # no plan, so no negative token count or tok/s either


def test_plan_through_the_real_cli_with_zero_bandwidth_prints_no_traceback():
    result, _ = run_cli("plan", "--model", "deepseek-v4-flash-fp4", "--tp", "4", "--gpu-bw-tbs", "0")
    assert result.returncode == 64 and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (json.dumps(NEGATIVE_LAYERS), "num_hidden_layers: must be at least 1, got -80"),
        (
            json.dumps({**NEGATIVE_LAYERS, "num_hidden_layers": "80"}),
            "num_hidden_layers: expected an integer",
        ),
        (b"\x89PNG\r\n\x1a\n\x00\x00", "is binary"),
        ("[1, 2]", "is not a JSON object"),
        ("{", "is not valid JSON"),
    ],
    ids=["negative-layers", "string-layers", "binary", "a-list", "truncated"],
)
def test_plan_refuses_a_bad_config_json(tmp_path, capsys, content, fragment):
    path = write_file(tmp_path, content, "config.json")
    code, out, err, _ = run_main(capsys, "plan", "--config", str(path), "--weights-gb", "131", "--tp", "8")
    assert code == 64, out + err
    assert fragment in err


# --- render: every file or none; hand edits kept unless --force -------------------------------------------
def rendered_files(out):
    return sorted(str(p.relative_to(out)) for p in out.rglob("*") if p.is_file())


def changed_pd():
    data = read_topology_file(PD)
    for server in data["servers"]:
        server["mem_fraction_static"] = 0.84
    data["nccl"] = {"NCCL_DEBUG": "INFO"}  # both env files change too: three files to move
    return data


def test_render_into_a_target_that_is_a_directory_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "etc/sglang/pd-1p1d/compose.yaml").mkdir(parents=True)  # the 3rd of 5 files
    code, _, err, _ = run_main(capsys, "topology", "render", str(PD), "--out", str(out))
    assert code == 3
    assert "compose.yaml is in the way: it is not a regular file" in err
    assert rendered_files(out) == []


def test_render_where_a_directory_must_be_is_a_file_writes_nothing(tmp_path, capsys):
    out = tmp_path / "out"
    (out / "etc").mkdir(parents=True)
    (out / "etc/systemd").write_text("a file\n")
    code, _, err, _ = run_main(capsys, "topology", "render", str(PD), "--out", str(out))
    assert code == 3 and "needs it to be a directory" in err
    assert rendered_files(out) == ["etc/systemd"]


def test_a_failed_move_puts_every_file_back(tmp_path, monkeypatch):
    out = tmp_path / "out"
    assert main(["topology", "render", str(PD), "--out", str(out)]) == 0
    before = {p: (out / p).read_bytes() for p in rendered_files(out)}
    real_replace = os.replace
    calls = []

    def failing_replace(source, target):
        calls.append(target)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        return real_replace(source, target)

    monkeypatch.setattr(writer.os, "replace", failing_replace)
    with pytest.raises(writer.WriteError, match="every file was put back"):
        writer.write_atomically(out, render(check_topology(changed_pd())[0]))
    assert {p: (out / p).read_bytes() for p in rendered_files(out)} == before


def test_hand_edited_file_is_reported_and_kept_unless_forced(tmp_path, capsys):
    out = tmp_path / "out"
    assert main(["topology", "render", str(PD), "--out", str(out)]) == 0
    compose = out / "etc/sglang/pd-1p1d/compose.yaml"
    compose.write_text(compose.read_text() + "# tuned by hand\n")
    before = {p: (out / p).read_bytes() for p in rendered_files(out)}
    changed = write_file(tmp_path, yaml.safe_dump(changed_pd()))
    code, _, err, _ = run_main(capsys, "topology", "render", str(changed), "--out", str(out))
    assert code == 3
    assert "changed by hand since the last render" in err and str(compose) in err
    assert {p: (out / p).read_bytes() for p in rendered_files(out)} == before  # nothing at all written
    code, _, err, _ = run_main(capsys, "topology", "render", str(changed), "--out", str(out), "--force")
    assert code == 0 and "warning: overwrote" in err
    assert "'0.84'" in compose.read_text() and "# tuned by hand" not in compose.read_text()


def test_render_again_leaves_its_own_files_alone_and_updates_them(tmp_path, capsys):
    out = tmp_path / "out"
    assert run_main(capsys, "topology", "render", str(PD), "--out", str(out))[0] == 0
    code, stdout, _, _ = run_main(capsys, "topology", "render", str(PD), "--out", str(out))
    assert code == 0 and stdout.count("(unchanged)") == 5
    # Files sglnode wrote (their hashes are in the manifest) are replaced without --force.
    changed = write_file(tmp_path, yaml.safe_dump(changed_pd()))
    assert run_main(capsys, "topology", "render", str(changed), "--out", str(out))[0] == 0
    assert "'0.84'" in (out / "etc/sglang/pd-1p1d/compose.yaml").read_text()


def test_a_foreign_file_in_a_nonempty_directory_is_not_overwritten(tmp_path, capsys):
    out = tmp_path / "out"
    unit = out / "etc/systemd/system/sglang-pd-1p1d.service"
    unit.parent.mkdir(parents=True)
    unit.write_text("[Unit]\nDescription=someone else's\n")
    code, _, err, _ = run_main(capsys, "topology", "render", str(PD), "--out", str(out))
    assert code == 3 and str(unit) in err
    assert unit.read_text() == "[Unit]\nDescription=someone else's\n"
    assert rendered_files(out) == ["etc/systemd/system/sglang-pd-1p1d.service"]


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["--prefix", "srv/relative"], "prefix 'srv/relative' must be an absolute path"),
        (["--prefix", "/srv/a\nExecStartPre=/bin/sh"], "must be text without control characters"),
        (["--bind-address", "0.0.0.0:80"], "is not an IP address"),
        (["--p2p-level", "FAST"], "p2p_level 'FAST' is not one of LOC, NVL, PIX, PXB, PHB, SYS"),
        (["--node-gpus", "0"], "--node-gpus: must be 1..1024, got 0"),
    ],
    ids=["relative-prefix", "newline-prefix", "bad-bind-address", "bad-p2p-level", "zero-node-gpus"],
)
def test_render_options_that_would_break_a_file_are_usage_errors(tmp_path, capsys, args, fragment):
    out = tmp_path / "out"
    code, _, err, _ = run_main(capsys, "topology", "render", str(PD), "--out", str(out), *args)
    assert code == 64 and fragment in err
    assert not out.exists()


def test_unit_paths_with_spaces_and_percent_are_escaped_for_systemd(tmp_path):
    out = tmp_path / "out"
    assert main(["topology", "render", str(PD), "--out", str(out), "--prefix", "/srv/my node/100%"]) == 0
    unit = (out / "etc/systemd/system/sglang-pd-1p1d.service").read_text()
    assert "Documentation=file:///srv/my%%20node/100%%25/etc/sglang/pd-1p1d/compose.yaml" in unit
    assert "WorkingDirectory=/srv/my node/100%%/etc/sglang/pd-1p1d" in unit


def test_sim_reports_a_port_in_use_as_uvicorn_does():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = {
            **os.environ,
            "PYTHONPATH": str(REPO / "tools"),
            "SGLNODE_SIM_STARTUP_S": "0",
            "SGLNODE_SIM_TIME_SCALE": "0",
        }
        argv = ["--model-path", "/m", "--tp-size", "4", "--host", "127.0.0.1", "--port", str(port)]
        result = subprocess.run(
            [sys.executable, "-m", "sglnode", "sim", *argv],
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT_S,
            env=env,
            check=False,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 1
    expected = f"('127.0.0.1', {port}): address already in use"
    assert f"ERROR:    [Errno 98] error while attempting to bind on address {expected}" in output
    assert "Traceback" not in output
