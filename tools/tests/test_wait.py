import io
import json
import subprocess
import threading
import time
import uuid
from argparse import Namespace
from pathlib import Path

import pytest
from docker_available import BASE_IMAGE, docker_image_ready
from fake_sglang_http import FakeSGLang, closed_port_url
from hostile_servers import HostileServer

from sglnode.commands import wait as wait_command
from sglnode.readiness import waiter
from sglnode.readiness.logwatch import CommandFollower, ExitInfo, FileFollower
from sglnode.readiness.waiter import Outcome, WaitOptions, wait_for_server

# Issue 5: "the diagnosis is printed <= 1 s after the fatal line is written".
LATENCY_BUDGET_S = 1.0

STARTUP = [
    "[2026-11-29 09:40:00] server_args=ServerArgs(model_path='/models/llama', tp_size=2)",
    "[2026-11-29 09:40:01 TP0] Load weight begin. avail mem=93.61 GB",
    "[2026-11-29 09:40:01 TP1] Load weight begin. avail mem=93.61 GB",
    "[2026-11-29 09:40:30 TP0] Load weight end. elapsed=29.00 s, type=LlamaForCausalLM, "
    "avail mem=60.00 GB, mem usage=33.61 GB.",
    "[2026-11-29 09:40:31 TP0] KV Cache is allocated. #tokens: 900000, K size: 27.00 GB, V size: 27.00 GB",
    "[2026-11-29 09:40:31 TP0] Capture target decode CUDA graph begin. backend=full, "
    "num_tokens_per_req=1, bs=[1, 2, 4], avail mem=1.20 GB",
]
OOM_TRACEBACK = [
    "[2026-11-29 09:40:33 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/model_runner.py", '
    "line 2110, in init_device_graphs",
    '  File "/sgl-workspace/sglang/python/sglang/srt/model_executor/cuda_graph_runner.py", '
    "line 500, in capture_one_batch_size",
]
FATAL_OOM = (
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 640.00 MiB. "
    "GPU 0 has a total capacity of 94.97 GiB of which 301.00 MiB is free."
)
KILL = "[2026-11-29 09:40:33] kill_process_tree called: parent_pid=9001, include_parent=True, pid=9001"


class TimedStream(io.StringIO):
    """Records when a marker first appears in what was written."""

    def __init__(self, marker: str) -> None:
        super().__init__()
        self.marker = marker
        self.marked_at: float | None = None

    def write(self, text: str) -> int:
        if self.marked_at is None and self.marker in text:
            self.marked_at = time.monotonic()
        return super().write(text)


def _args(**overrides) -> Namespace:
    values = dict(
        url=None,
        log=None,
        container=None,
        compose_file=None,
        service=None,
        unit=None,
        timeout=10.0,
        skip_existing=False,
        pd=False,
        json=False,
        connect_grace=120.0,
    )
    values.update(overrides)
    return Namespace(**values)


def _write_lines(path: Path, lines: list[str], pause: float = 0.0) -> float:
    """Append lines one write at a time; return when the last one was flushed."""
    with path.open("a", encoding="utf-8") as handle:
        for line in lines:
            handle.write(line + "\n")
            handle.flush()
            if pause:
                time.sleep(pause)
    return time.monotonic()


def _run_in_thread(args: Namespace, stdout: io.StringIO) -> tuple[threading.Thread, dict]:
    result: dict = {}

    def target() -> None:
        result["code"] = wait_command.run(args, stdout=stdout, stderr=io.StringIO())

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread, result


def test_oom_diagnosis_is_printed_within_a_second_of_the_fatal_line(tmp_path):
    """Measured: a writer appends a startup, then an OOM traceback; we time fatal-line write -> output."""
    log = tmp_path / "server.log"
    log.touch()
    stdout = TimedStream(marker="cause: oom")
    thread, result = _run_in_thread(_args(log=log), stdout)
    _write_lines(log, STARTUP, pause=0.02)
    _write_lines(log, OOM_TRACEBACK)
    fatal_written_at = _write_lines(log, [FATAL_OOM])
    time.sleep(0.05)  # the kill line follows a moment later, as in real logs
    _write_lines(log, [KILL])
    thread.join(10)
    assert not thread.is_alive()
    assert result["code"] == 2
    assert stdout.marked_at is not None, stdout.getvalue()
    latency = stdout.marked_at - fatal_written_at
    assert latency <= LATENCY_BUDGET_S, f"diagnosis took {latency:.3f}s"
    output = stdout.getvalue()
    assert "cause: oom (cuda_graph)" in output
    assert "kill_process_tree" in output  # the line written just after the fatal one made it in


def test_kill_line_alone_waits_briefly_then_says_unknown_within_a_second(tmp_path):
    log = tmp_path / "server.log"
    log.touch()
    stdout = TimedStream(marker="cause: unknown")
    thread, result = _run_in_thread(_args(log=log), stdout)
    _write_lines(log, STARTUP[:4])
    killed_at = _write_lines(log, [KILL])
    thread.join(10)
    assert result["code"] == 2
    latency = stdout.marked_at - killed_at
    assert waiter.KILL_GRACE_S * 0.9 <= latency <= LATENCY_BUDGET_S, f"{latency:.3f}s"
    assert "dmesg" in stdout.getvalue()


def test_cause_printed_just_after_the_kill_line_is_still_caught(tmp_path):
    log = tmp_path / "server.log"
    log.touch()
    stdout = TimedStream(marker="cause:")
    thread, result = _run_in_thread(_args(log=log), stdout)
    _write_lines(log, STARTUP[:4])
    _write_lines(log, [KILL])
    time.sleep(0.2)  # another rank reports the real cause after the launcher's kill line
    _write_lines(log, ["[2026-11-29 09:40:31 TP1] RuntimeError: NCCL error: unhandled system error"])
    thread.join(10)
    assert result["code"] == 2
    assert "cause: nccl" in stdout.getvalue()


def test_ready_line_in_the_log_means_ready(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(
        "\n".join([*STARTUP, "[2026-11-29 09:40:40] The server is fired up and ready to roll!", ""])
    )
    stdout = io.StringIO()
    assert wait_command.run(_args(log=log), stdout=stdout, stderr=io.StringIO()) == 0
    output = stdout.getvalue()
    assert "ready after" in output
    assert "cuda_graph" in output  # progress lines were shown (plain, not a TTY)


def test_http_readiness_means_ready_without_a_log():
    routes = {"GET /health_generate": [(503, ""), (503, ""), (200, "")]}
    with FakeSGLang(routes) as fake:
        stdout = io.StringIO()
        code = wait_command.run(_args(url=fake.url, json=True), stdout=stdout, stderr=io.StringIO())
    payload = json.loads(stdout.getvalue())
    assert code == 0
    assert payload["outcome"] == "ready"
    assert payload["probe"]["status"] == 200


def test_pd_readiness_needs_one_generation_through_the_router():
    routes = {"POST /generate": [(503, "no decode"), (200, '{"text": "!"}')], "GET /health": [(200, "")]}
    with FakeSGLang(routes) as fake:
        code = wait_command.run(_args(url=fake.url, pd=True), stdout=io.StringIO(), stderr=io.StringIO())
        assert fake.paths().count("POST /generate") == 2
        assert "GET /health" not in fake.paths()
    assert code == 0


def test_timeout_reports_the_stage_reached(tmp_path):
    log = tmp_path / "server.log"
    log.write_text(STARTUP[1] + "\n")
    stdout = io.StringIO()
    started = time.monotonic()
    code = wait_command.run(_args(log=log, timeout=0.5, json=True), stdout=stdout, stderr=io.StringIO())
    assert code == 3
    assert time.monotonic() - started < 3.0
    payload = json.loads(stdout.getvalue())
    assert (payload["outcome"], payload["stage"], payload["diagnosis"]) == ("timed_out", "weights", None)


def test_nothing_listening_and_no_log_is_unreachable(tmp_path):
    args = _args(url=closed_port_url(), log=tmp_path / "never-written.log", timeout=0.5)
    assert wait_command.run(args, stdout=io.StringIO(), stderr=io.StringIO()) == 4


def test_container_exit_is_terminal_and_its_oom_kill_is_evidence():
    follower = CommandFollower(
        ["sh", "-c", "echo '[2026-11-29 09:40:01 TP0] Load weight begin. avail mem=93.61 GB'"],
        name="container:sglang",
        exit_probe=lambda: ExitInfo(137, "container exited: ExitCode=137 OOMKilled=true"),
    )
    result = wait_for_server(
        WaitOptions(url=None, follower=follower, timeout_s=10, gpu_memory_reader=lambda: None)
    )
    assert result.outcome is Outcome.CRASHED
    assert result.diagnosis.cause == "host_oom"
    assert result.process_exit.exit_code == 137
    assert result.diagnosis.notes[0].startswith("process exit:")


def test_server_that_stops_answering_has_crashed(monkeypatch):
    monkeypatch.setattr(waiter, "PROBE_MAX_INTERVAL_S", 0.05)
    fake = FakeSGLang({"GET /health_generate": [(503, "")]})
    with fake:
        options = WaitOptions(url=fake.url, follower=None, timeout_s=10, gpu_memory_reader=lambda: None)
        thread_result: dict = {}
        thread = threading.Thread(target=lambda: thread_result.update(result=wait_for_server(options)))
        thread.start()
        time.sleep(0.3)
    thread.join(10)
    result = thread_result["result"]
    assert result.outcome is Outcome.CRASHED
    assert "stopped answering" in result.process_exit.detail


def test_gpu_memory_at_death_is_recorded_when_available(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join([*STARTUP[:3], KILL, ""]))
    memory = [{"index": 0, "used_mib": 90000, "total_mib": 97887}]
    options = WaitOptions(
        url=None, follower=FileFollower(log), timeout_s=10, gpu_memory_reader=lambda: memory
    )
    result = wait_for_server(options)
    assert result.diagnosis.gpu_memory_at_death == memory


def test_slow_nvidia_smi_never_delays_the_report_past_the_budget(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join([*STARTUP, FATAL_OOM, ""]))

    def slow_reader():
        time.sleep(3)
        return [{"index": 0, "used_mib": 1, "total_mib": 2}]

    options = WaitOptions(url=None, follower=FileFollower(log), timeout_s=10, gpu_memory_reader=slow_reader)
    started = time.monotonic()
    result = wait_for_server(options)
    assert time.monotonic() - started < LATENCY_BUDGET_S
    assert result.diagnosis.gpu_memory_at_death is None


def test_json_output_schema_is_stable(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join([*STARTUP, FATAL_OOM, ""]))
    stdout = io.StringIO()
    code = wait_command.run(_args(log=log, json=True), stdout=stdout, stderr=io.StringIO())
    payload = json.loads(stdout.getvalue())
    assert code == 2
    assert list(payload) == [
        "schema_version",
        "outcome",
        "exit_code",
        "elapsed_s",
        "stage",
        "milestones",
        "diagnosis",
        "probe",
        "process_exit",
        "log_source",
        "url",
        "reachability",
        "interrupted",
    ]
    assert payload["exit_code"] == 2
    assert payload["diagnosis"]["cause"] == "oom"
    assert set(payload["milestones"][0]) == {"stage", "elapsed_s", "line_no", "text"}


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        ({}, "give --url"),
        ({"compose_file": Path("c.yaml")}, "needs --service"),
        ({"url": "http://127.0.0.1:1", "service": "s"}, "only makes sense"),
        ({"log": Path("x.log"), "pd": True}, "--pd needs --url"),
        ({"url": "http://127.0.0.1:1", "timeout": 0}, "positive"),
        ({"url": "http://127.0.0.1:1", "skip_existing": True}, "only applies to --log"),
    ],
)
def test_usage_errors_exit_64_before_waiting(overrides, message):
    stderr = io.StringIO()
    assert (
        wait_command.run(_args(**overrides), stdout=io.StringIO(), stderr=stderr) == wait_command.EXIT_USAGE
    )
    assert message in stderr.getvalue()


def test_exit_codes_are_the_documented_ones():
    assert waiter.EXIT_CODES == {
        Outcome.READY: 0,
        Outcome.CRASHED: 2,
        Outcome.TIMED_OUT: 3,
        Outcome.UNREACHABLE: 4,
    }


def test_skip_existing_ignores_an_older_run_in_the_same_log(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("\n".join([*STARTUP, FATAL_OOM, KILL, ""]))  # yesterday's crash
    stdout = io.StringIO()
    thread, result = _run_in_thread(_args(log=log, skip_existing=True, json=True), stdout)
    time.sleep(0.3)
    _write_lines(log, [STARTUP[1], "[2026-11-29 09:41:00] The server is fired up and ready to roll!"])
    thread.join(10)
    payload = json.loads(stdout.getvalue())
    assert result["code"] == 0
    assert payload["milestones"][0]["line_no"] == len(STARTUP) + 3  # numbering continues the file's


def test_a_log_command_that_cannot_run_is_reported_not_waited_out():
    follower = CommandFollower(["/nonexistent/docker", "logs", "-f", "x"], name="container:x")
    started = time.monotonic()
    result = wait_for_server(
        WaitOptions(url=None, follower=follower, timeout_s=10, gpu_memory_reader=lambda: None)
    )
    assert time.monotonic() - started < 2.0
    assert result.outcome is Outcome.CRASHED
    assert "cannot follow container:x" in result.process_exit.detail


@pytest.mark.parametrize(
    ("overrides", "tool"), [({"container": "sglang"}, "docker"), ({"unit": "sglang"}, "journalctl")]
)
def test_missing_log_tool_is_a_usage_error(monkeypatch, overrides, tool):
    monkeypatch.setattr("shutil.which", lambda name: None)
    stderr = io.StringIO()
    assert (
        wait_command.run(_args(**overrides), stdout=io.StringIO(), stderr=stderr) == wait_command.EXIT_USAGE
    )
    assert f"{tool} is not installed" in stderr.getvalue()


@pytest.mark.docker
@pytest.mark.skipif(not docker_image_ready(), reason=f"needs docker and the {BASE_IMAGE} image")
def test_wait_on_a_real_container_that_ooms_while_loading_weights():
    name = f"sglnode-wait-{uuid.uuid4().hex[:8]}"
    script = "; ".join(
        [
            f"echo '{STARTUP[1]}'",
            "sleep 0.5",
            "echo '  File \"/sgl/model_runner.py\", line 1, in load_model'",
            f"echo '{FATAL_OOM}' >&2",
            "sleep 30",
        ]
    )
    subprocess.run(
        ["docker", "run", "-d", "--name", name, BASE_IMAGE, "sh", "-c", script],
        check=True,
        capture_output=True,
        timeout=60,
    )
    try:
        stdout = io.StringIO()
        args = _args(container=name, timeout=20.0, json=True)
        code = wait_command.run(args, stdout=stdout, stderr=io.StringIO())
        payload = json.loads(stdout.getvalue())
        assert code == 2
        # Conclusive from the log alone: reported while the container is still running.
        assert payload["elapsed_s"] < 10
        assert (payload["diagnosis"]["cause"], payload["diagnosis"]["phase"]) == ("oom", "weights")
        assert payload["log_source"] == f"container:{name}"
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)


def test_a_ready_probe_waits_briefly_for_the_replayed_log_so_the_timeline_is_complete(tmp_path):
    # A wait started after the server: the probe answers ready at once, while `docker compose logs -f`
    # replays the startup a moment later. The milestones must still be collected, within the catch-up.
    log = tmp_path / "replay.log"
    log.write_text(
        "\n".join([*STARTUP, "[2026-11-29 09:40:40] The server is fired up and ready to roll!", ""])
    )
    follower = CommandFollower(["sh", "-c", f"sleep 0.3; cat {log}; exec sleep 30"], name="compose:decode0")
    with FakeSGLang({"GET /health_generate": [(200, "")]}) as fake:
        started = time.monotonic()
        result = wait_for_server(
            WaitOptions(url=fake.url, follower=follower, timeout_s=10, gpu_memory_reader=lambda: None)
        )
        elapsed = time.monotonic() - started
    assert result.outcome is Outcome.READY
    stages = [m.stage.label for m in result.milestones]
    assert {"weights", "kv_cache", "cuda_graph", "ready"} <= set(stages)
    assert elapsed < waiter.LOG_CATCHUP_S + 1.0


def test_a_ready_probe_is_not_held_up_when_the_log_says_nothing(tmp_path):
    follower = CommandFollower(["sh", "-c", "exec sleep 30"], name="compose:quiet")
    with FakeSGLang({"GET /health_generate": [(200, "")]}) as fake:
        result = wait_for_server(
            WaitOptions(url=fake.url, follower=follower, timeout_s=10, gpu_memory_reader=lambda: None)
        )
    assert result.outcome is Outcome.READY
    assert result.elapsed_s < waiter.LOG_CATCHUP_S + 0.5


# --- issue 16 (hostile input) and issue 13 (PD readiness) --------------------------------------
def test_a_log_path_that_is_a_directory_is_a_usage_error_not_a_crash(tmp_path):
    stderr = io.StringIO()
    code = wait_command.run(_args(log=tmp_path), stdout=io.StringIO(), stderr=stderr)
    assert code == wait_command.EXIT_USAGE
    assert "is a directory" in stderr.getvalue()


@pytest.mark.parametrize(
    ("url", "fragment"),
    [
        ("127.0.0.1:30000", "has no scheme: write http://127.0.0.1:30000"),
        ("http://[::1:30000", "brackets"),
        ("http://::1:30000", "brackets"),
        ("http://[::1]]:30000", "not host[:port]"),
        ("http://127.0.0.1:99999", "out of range"),
        ("http://127.0.0.1:0", "out of range"),
        ("ftp://127.0.0.1:1", "scheme must be"),
        ("http://127.0.0.1:30000/generate", "without a path"),
        ("http://300.1.1.1:1", "not an IPv4 address"),
    ],
)
def test_a_bad_url_is_a_usage_error_at_once(url, fragment):
    stderr = io.StringIO()
    started = time.monotonic()
    code = wait_command.run(_args(url=url), stdout=io.StringIO(), stderr=stderr)
    assert code == wait_command.EXIT_USAGE
    assert fragment in stderr.getvalue()
    assert time.monotonic() - started < 1.0


def test_a_refused_url_without_a_log_says_so_and_ends_unreachable_after_the_grace():
    stdout = io.StringIO()
    url = closed_port_url()
    started = time.monotonic()
    code = wait_command.run(
        _args(url=url, timeout=60.0, connect_grace=0.5), stdout=stdout, stderr=io.StringIO()
    )
    assert code == 4
    assert time.monotonic() - started < 5.0  # not the 60 s timeout
    output = stdout.getvalue()
    assert f"{url}: connection refused" in output  # the progress line, shown at the first probe
    assert "unreachable after" in output and "connection refused" in output.splitlines()[-2]


def test_a_refused_url_with_a_log_keeps_waiting_for_the_log(tmp_path):
    log = tmp_path / "server.log"
    stdout = io.StringIO()
    thread, result = _run_in_thread(_args(url=closed_port_url(), log=log, connect_grace=0.0), stdout)
    time.sleep(0.8)
    _write_lines(log, [*STARTUP, "[2026-11-29 09:40:40] The server is fired up and ready to roll!"])
    thread.join(10)
    assert result["code"] == 0
    assert "connection refused" in stdout.getvalue()


def test_a_server_that_accepts_but_never_answers_is_not_nothing_listening():
    with HostileServer("silent") as server:
        options = WaitOptions(
            url=server.url, follower=None, timeout_s=1.5, probe_timeout_s=0.3, gpu_memory_reader=lambda: None
        )
        result = wait_for_server(options)
    assert result.outcome is Outcome.TIMED_OUT  # something listens: not "unreachable" (4)
    assert result.reachability == "no_answer"
    assert "never answered" in wait_command.render(result)
    assert "nothing listening" not in wait_command.render(result)


@pytest.mark.parametrize("mode", ["drop", "close", "bad_status"])
def test_a_server_that_drops_or_speaks_no_http_is_reported_not_a_traceback(mode):
    with HostileServer(mode) as server:
        probe = waiter.SGLangClient(server.url, timeout=1.0).readiness()
    assert probe.readiness is waiter.Readiness.NO_ANSWER
    assert "accepts connections" in probe.detail or "not HTTP" in probe.detail


def test_an_empty_log_that_ends_is_not_called_a_kill():
    follower = CommandFollower(["true"], name="container:quiet", exit_probe=lambda: ExitInfo(0, "exited 0"))
    result = wait_for_server(
        WaitOptions(url=None, follower=follower, timeout_s=10, gpu_memory_reader=lambda: None)
    )
    assert result.outcome is Outcome.CRASHED
    text = " ".join(result.diagnosis.notes)
    assert "was killed" not in text and "kill line" not in text
    assert "held no lines" in text


def test_pd_readiness_ignores_the_log_ready_line_until_a_generation_succeeds(tmp_path):
    log = tmp_path / "router.log"
    log.write_text(
        "\n".join([*STARTUP, "[2026-11-29 09:40:40] The server is fired up and ready to roll!", ""])
    )
    routes = {"POST /generate": [(503, "no decode")] * 3 + [(200, '{"text": "!", "meta_info": {}}')]}
    with FakeSGLang(routes) as fake:
        stdout = io.StringIO()
        code = wait_command.run(
            _args(url=fake.url, log=log, pd=True, json=True), stdout=stdout, stderr=io.StringIO()
        )
        generations = fake.paths().count("POST /generate")
    payload = json.loads(stdout.getvalue())
    assert code == 0
    assert generations == 4  # READY came from the fourth (the first successful) generation
    assert payload["probe"] == {
        "endpoint": "/generate",
        "status": 200,
        "readiness": "ready",
        "detail": payload["probe"]["detail"],
    }
    assert payload["stage"] == "ready"  # the log line still updated the progress


def test_pd_never_ready_through_the_router_times_out_despite_the_log_line(tmp_path):
    log = tmp_path / "router.log"
    log.write_text("[2026-11-29 09:40:40] The server is fired up and ready to roll!\n")
    with FakeSGLang({"POST /generate": [(500, "KV transfer failed")]}) as fake:
        code = wait_command.run(
            _args(url=fake.url, log=log, pd=True, timeout=1.0), stdout=io.StringIO(), stderr=io.StringIO()
        )
    assert code == 3


def test_a_200_that_is_not_a_generation_is_not_pd_ready():
    with FakeSGLang({"POST /generate": [(200, "<html>proxy login</html>")]}) as fake:
        probe = waiter.SGLangClient(fake.url).readiness(pd=True)
    assert probe.readiness is waiter.Readiness.STARTING
    assert "without a generation" in probe.detail
