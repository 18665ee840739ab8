"""Issue 16: hostile input to `sglnode wait`, `bench` and `validate`, through the real CLI.

Every case runs `python -m sglnode ...` in its own session and checks: the documented exit code, a
message that says what happened, no "Traceback" anywhere in the output, and no process left
behind (every child inherits a tag in its environment; /proc is scanned for it afterwards).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from bench_fake_server import Behaviour, FakeServer
from fake_sglang_http import closed_port_url
from hostile_servers import NOT_SSE_BODY, HostileServer, raw_response

pytestmark = pytest.mark.timeout(120)

TOOLS = Path(__file__).resolve().parents[1]
REPO = TOOLS.parent
TAG_VAR = "SGLNODE_HOSTILE_TAG"
LEFTOVER_WAIT_S = 5.0
# Documented exit codes (docs/bench.md, docs/diagnose.md, sglnode.exitcodes).
DOCUMENTED = {0, 1, 2, 3, 4, 64, 70, 130, 143}
NO_MATPLOTLIB = (
    "import sys; sys.modules['matplotlib'] = None; from sglnode.cli import main; sys.exit(main(sys.argv[1:]))"
)


def _env(tag: str) -> dict[str, str]:
    env = dict(os.environ)
    env[TAG_VAR] = tag
    env["PYTHONPATH"] = f"{TOOLS}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["NO_PROXY"] = env["no_proxy"] = "*"
    return env


def tagged_processes(tag: str) -> list[str]:
    """Processes (other than the caller) whose environment carries the tag: psutil-free."""
    needle = f"{TAG_VAR}={tag}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if needle in (entry / "environ").read_bytes():
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
                found.append(f"{entry.name}: {cmdline}")
        except OSError:  # gone, or not ours to read
            continue
    return found


def assert_nothing_left(tag: str) -> None:
    deadline = time.monotonic() + LEFTOVER_WAIT_S
    while (left := tagged_processes(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, f"processes left behind: {left}"


def sglnode(args: list[str], timeout: float = 60, prefix: list[str] | None = None) -> tuple[int, str, str]:
    tag = uuid.uuid4().hex
    cmd = [sys.executable, *(prefix or ["-m", "sglnode"]), *args]
    proc = subprocess.run(
        cmd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=_env(tag),
        start_new_session=True,
        check=False,
    )
    assert_nothing_left(tag)
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("hostile")
    a_file = tmp / "a-file"
    a_file.write_text("x")
    with (
        HostileServer("silent") as silent,
        HostileServer("drop") as drop,
        HostileServer("bad_status") as bad_status,
        HostileServer("raw", raw_response(NOT_SSE_BODY)) as not_sse,
        HostileServer("raw", raw_response(NOT_SSE_BODY, b"text/event-stream")) as sse_typed,
        FakeServer(Behaviour()) as good,
    ):
        yield {
            "silent": silent.url,
            "drop": drop.url,
            "bad_status": bad_status.url,
            "not_sse": not_sse.url,
            "sse_typed": sse_typed.url,
            "good": good.url,
            "closed": closed_port_url(),
            "tmp": str(tmp),
            "file": str(a_file),
            "topology": str(REPO / "inventory/topologies/pd-1p1d.yml"),
        }


B = ["bench", "--no-progress", "--warmup", "0", "--num-requests", "2", "--output-len", "4"]
CASES = [
    # (id, argv, exit code, fragment that must appear)
    ("wait-timeout-nan", ["wait", "--url", "{good}", "--timeout", "nan"], 64, "finite"),
    ("wait-timeout-inf", ["wait", "--url", "{good}", "--timeout", "inf"], 64, "finite"),
    ("wait-timeout-negative", ["wait", "--url", "{good}", "--timeout", "-1"], 64, "must be > 0"),
    ("wait-grace-nan", ["wait", "--url", "{good}", "--connect-grace", "nan"], 64, "finite"),
    ("wait-no-scheme", ["wait", "--url", "127.0.0.1:30000"], 64, "has no scheme"),
    ("wait-ipv6-typo", ["wait", "--url", "http://[::1:30000"], 64, "brackets"),
    ("wait-ipv6-unbracketed", ["wait", "--url", "http://::1:30000"], 64, "brackets"),
    ("wait-port-range", ["wait", "--url", "http://127.0.0.1:99999"], 64, "out of range"),
    ("wait-log-directory", ["wait", "--log", "{tmp}", "--timeout", "5"], 64, "is a directory"),
    (
        "wait-refused",
        ["wait", "--url", "{closed}", "--connect-grace", "1", "--timeout", "60"],
        4,
        "connection refused",
    ),
    (
        "wait-silent",
        ["wait", "--url", "{silent}", "--timeout", "2"],
        3,
        "accepts connections but never answered",
    ),
    ("wait-drop", ["wait", "--url", "{drop}", "--timeout", "2"], 3, "closed them without an answer"),
    ("wait-bad-status", ["wait", "--url", "{bad_status}", "--timeout", "2"], 3, "not HTTP"),
    ("bench-request-timeout-nan", [*B, "--url", "{good}", "--request-timeout", "nan"], 64, "finite"),
    ("bench-stall-timeout-nan", [*B, "--url", "{good}", "--stall-timeout", "nan"], 64, "finite"),
    ("bench-error-rate-nan", [*B, "--url", "{good}", "--max-error-rate", "nan"], 64, "finite"),
    ("bench-target-nan", [*B, "--url", "{good}", "--min-output-tok-s", "nan"], 64, "finite"),
    ("bench-no-scheme", [*B, "--url", "127.0.0.1:1"], 64, "has no scheme"),
    ("bench-ipv6-typo", [*B, "--url", "http://[::1:1"], 64, "brackets"),
    (
        "bench-json-missing-dir",
        [*B, "--url", "{good}", "--json", "/nonexistent/dir/b.json"],
        64,
        "does not exist",
    ),
    ("bench-json-is-dir", [*B, "--url", "{good}", "--json", "{tmp}"], 64, "is a directory"),
    ("bench-json-under-file", [*B, "--url", "{good}", "--json", "{file}/b.json"], 64, "is not a directory"),
    ("bench-not-sse", [*B, "--url", "{not_sse}"], 1, "not_sse"),
    ("bench-sse-typed-garbage", [*B, "--url", "{sse_typed}"], 1, "bad_sse_framing"),
    ("bench-drop", [*B, "--url", "{drop}"], 1, "errors:"),
    ("bench-bad-status", [*B, "--url", "{bad_status}"], 1, "bad_status_line"),
    ("bench-closed", [*B, "--url", "{closed}"], 1, "connect_failed"),
    ("bench-huge-concurrency", [*B, "--url", "{good}", "--concurrency", "100000000"], 0, "clamped to 2"),
    (
        "bench-concurrency-beyond-fds",
        ["bench", "--url", "{good}", "--concurrency", "5000000", "--num-requests", "5000000"],
        64,
        "--concurrency",
    ),
    ("bench-workers-zero", [*B, "--url", "{good}", "--workers", "0"], 64, "--workers"),
    (
        "validate-report-dir-is-file",
        ["validate", "{topology}", "--compose-dir", "{tmp}", "--report-dir", "{file}"],
        64,
        "is a file",
    ),
    (
        "validate-bad-target",
        [
            "validate",
            "{topology}",
            "--compose-dir",
            "{tmp}",
            "--report-dir",
            "{tmp}/r",
            "--min-output-tok-s",
            "x",
        ],
        64,
        "not a number",
    ),
]


@pytest.mark.parametrize(("argv", "code", "fragment"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_hostile_input_gets_a_message_and_a_documented_exit_code(servers, argv, code, fragment):
    args = [a.format(**servers) for a in argv]
    started = time.monotonic()
    got, out, err = sglnode(args)
    text = out + err
    assert "Traceback" not in text, text
    assert got == code, text
    assert fragment in text, text
    assert got in DOCUMENTED
    assert time.monotonic() - started < 30  # nothing waits out a default timeout
    if "bench" in args[:1] and got == 1:
        assert "checks: PASS" not in text and "0/2" in text, text  # nothing counted as ok


def test_plot_without_matplotlib_is_a_usage_error_before_anything_is_sent(servers, tmp_path):
    got, out, err = sglnode(
        [*B, "--url", servers["good"], "--plot", str(tmp_path / "p.png")], prefix=["-c", NO_MATPLOTLIB]
    )
    assert got == 64 and "matplotlib" in err and "Traceback" not in out + err


def test_a_failing_plot_is_a_warning_after_the_table(servers, tmp_path, monkeypatch):
    from sglnode.bench import plot as plot_module  # noqa: PLC0415
    from sglnode.cli import main  # noqa: PLC0415

    def broken(*_args, **_kwargs):
        raise RuntimeError("no display")

    monkeypatch.setattr(plot_module, "plot_sweep", broken)
    out_json = tmp_path / "b.json"
    code = main([*B, "--url", servers["good"], "--plot", str(tmp_path / "p.png"), "--json", str(out_json)])
    assert code == 0
    assert json.loads(out_json.read_text())["complete"] is True


def test_memory_stays_bounded_with_an_absurd_concurrency(servers):
    """`--concurrency 100000000` with 4 requests took 5.8 GB; VmHWM of the process that ran it."""
    probe = (
        "import sys; from sglnode.cli import main; code = main(sys.argv[1:]); "
        "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM')][0].split()[1]; "
        "print('VmHWM_KB', hwm, file=sys.stderr); sys.exit(code)"
    )
    got, out, err = sglnode(
        [
            "bench",
            "--url",
            servers["good"],
            "--concurrency",
            "100000000",
            "--num-requests",
            "4",
            "--warmup",
            "0",
        ],
        prefix=["-c", probe],
    )
    assert got == 0, out + err
    hwm_kb = int(err.split("VmHWM_KB")[1].split()[0])
    assert hwm_kb < 300 * 1024, f"peak RSS {hwm_kb / 1024:.0f} MB"


# --- signals: every child ends, partial results are kept -------------------------------------
def _start(args: list[str], tag: str, prefix: list[str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, *(prefix or ["-m", "sglnode"]), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=_env(tag),
        start_new_session=True,
    )


def _wait_for_children(proc: subprocess.Popen[str], tag: str, count: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        others = [p for p in tagged_processes(tag) if not p.startswith(f"{proc.pid}:")]
        if len(others) >= count:
            return
        time.sleep(0.1)
    raise AssertionError(f"only {tagged_processes(tag)} started")


@pytest.mark.parametrize(
    ("sig", "code", "workers"),
    [(signal.SIGTERM, 143, 4), (signal.SIGINT, 130, 4), (signal.SIGINT, 130, 1), (signal.SIGTERM, 143, 1)],
)
def test_a_signal_to_bench_ends_every_worker_and_keeps_a_partial_report(tmp_path, sig, code, workers):
    tag = uuid.uuid4().hex
    report = tmp_path / "bench.json"
    with FakeServer(Behaviour(itl_s=0.02)) as server:
        args = ["bench", "--url", server.url, "--json", str(report), "--no-progress", "--warmup", "0"]
        args += [
            "--concurrency",
            "4,8",
            "--num-requests",
            "400",
            "--output-len",
            "64",
            "--workers",
            str(workers),
        ]
        proc = _start(args, tag)
        if workers > 1:
            _wait_for_children(proc, tag, workers)
        deadline = time.monotonic() + 30
        while len(server.last_token_sent) < 6 and time.monotonic() < deadline:
            time.sleep(0.05)  # until some requests have finished
        time.sleep(0.2)
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # Ctrl-C reaches the whole foreground process group
        else:
            proc.send_signal(sig)  # `kill PID`: only the bench itself
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, out + err
    assert "Traceback" not in out + err
    assert_nothing_left(tag)
    data = json.loads(report.read_text())
    assert data["complete"] is False and data["interrupted"] == sig.name and data["exit_code"] == code
    assert data["stages"] and data["stages"][0]["requests"]["ok"] > 0
    assert data["stages"][-1]["interrupted"] == sig.name
    assert "INTERRUPTED" in out and "c=4" in out  # the table of what was measured is printed


@pytest.mark.parametrize(("sig", "code"), [(signal.SIGTERM, 143), (signal.SIGINT, 130)])
def test_a_signal_to_wait_ends_the_log_follower_it_started(tmp_path, sig, code):
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    docker = fake_bin / "docker"
    docker.write_text("#!/bin/sh\nexec sleep 300\n")  # `docker logs -f` that never ends
    docker.chmod(0o755)
    tag = uuid.uuid4().hex
    env_path = f"{fake_bin}{os.pathsep}{os.environ['PATH']}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglnode", "wait", "--container", "sglang", "--timeout", "60"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**_env(tag), "PATH": env_path},
        start_new_session=True,
    )
    _wait_for_children(proc, tag, 1)
    proc.send_signal(sig)
    out, err = proc.communicate(timeout=20)
    assert proc.returncode == code, out + err
    assert f"interrupted by {sig.name}" in out and "Traceback" not in out + err
    assert_nothing_left(tag)
