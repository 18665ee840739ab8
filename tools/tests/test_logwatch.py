import os
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from docker_available import BASE_IMAGE, docker_image_ready

from sglnode.readiness import logwatch
from sglnode.readiness.logwatch import CommandFollower, ExitInfo, FileFollower

COLLECT_TIMEOUT_S = 5.0


class Collector:
    """Runs a follower in a thread and collects its events."""

    def __init__(self, follower) -> None:
        self.follower = follower
        self.events = []
        self.stop = threading.Event()
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        for event in self.follower.follow(self.stop):
            self.events.append(event)
        self.done.set()

    def lines(self) -> list[str]:
        return [event.line for event in self.events]

    def wait_for(self, count: int, timeout: float = COLLECT_TIMEOUT_S) -> list[str]:
        deadline = time.monotonic() + timeout
        while len(self.events) < count and time.monotonic() < deadline:
            time.sleep(0.01)
        return self.lines()

    def close(self) -> None:
        self.stop.set()
        self.thread.join(COLLECT_TIMEOUT_S)
        assert not self.thread.is_alive()


def _append(path: Path, text: str) -> None:
    with path.open("a", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()


def test_file_created_after_the_follower_started(tmp_path):
    log = tmp_path / "server.log"
    collector = Collector(FileFollower(log, poll_interval=0.01))
    time.sleep(0.1)
    _append(log, "first\nsecond\n")
    assert collector.wait_for(2) == ["first", "second"]
    assert [event.line_no for event in collector.events] == [1, 2]
    collector.close()


def test_lines_appended_later_are_followed_with_increasing_timestamps(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("a\n")
    collector = Collector(FileFollower(log, poll_interval=0.01))
    collector.wait_for(1)
    _append(log, "b\n")
    assert collector.wait_for(2) == ["a", "b"]
    assert collector.events[0].timestamp <= collector.events[1].timestamp
    collector.close()


def test_truncated_file_is_read_again_from_the_start(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("old 1\nold 2\nold 3\n")
    collector = Collector(FileFollower(log, poll_interval=0.01))
    collector.wait_for(3)
    with log.open("w", encoding="utf-8") as handle:  # truncate, like `> server.log` on relaunch
        handle.write("new\n")
    assert collector.wait_for(4)[-1] == "new"
    collector.close()


def test_replaced_file_is_reopened(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("before rotation that is long enough\n")
    collector = Collector(FileFollower(log, poll_interval=0.01))
    collector.wait_for(1)
    replacement = tmp_path / "server.log.new"
    replacement.write_text("after rotation that is long enough as well\n")
    os.replace(replacement, log)
    assert collector.wait_for(2)[-1] == "after rotation that is long enough as well"
    collector.close()


def test_a_last_line_without_newline_is_emitted_after_a_pause(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("complete\nkill_process_tree called")
    collector = Collector(FileFollower(log, poll_interval=0.01))
    started = time.monotonic()
    assert collector.wait_for(2) == ["complete", "kill_process_tree called"]
    assert time.monotonic() - started < logwatch.PARTIAL_LINE_FLUSH_S + 1.0
    collector.close()


def test_stop_ends_a_follow_on_a_missing_file(tmp_path):
    collector = Collector(FileFollower(tmp_path / "never.log", poll_interval=0.01))
    time.sleep(0.05)
    collector.close()
    assert collector.done.is_set()
    assert collector.events == []


def test_command_follower_yields_stdout_and_stderr_then_reports_the_end():
    follower = CommandFollower(["sh", "-c", "echo out; echo err >&2; exit 3"], name="cmd")
    collector = Collector(follower)
    assert collector.done.wait(COLLECT_TIMEOUT_S)
    assert sorted(collector.lines()) == ["err", "out"]
    info = follower.exit_info()
    assert info is not None and "log stream ended" in info.detail


def test_command_follower_asks_the_exit_probe_when_the_stream_ends():
    follower = CommandFollower(
        ["sh", "-c", "echo bye"],
        name="cmd",
        exit_probe=lambda: ExitInfo(137, "container exited: ExitCode=137"),
    )
    collector = Collector(follower)
    assert collector.done.wait(COLLECT_TIMEOUT_S)
    assert follower.exit_info() == ExitInfo(137, "container exited: ExitCode=137")


def test_command_follower_stops_a_running_command():
    follower = CommandFollower(["sh", "-c", "echo start; exec sleep 30"], name="cmd", watch_interval=0.05)
    collector = Collector(follower)
    assert collector.wait_for(1) == ["start"]
    started = time.monotonic()
    collector.close()
    assert time.monotonic() - started < 3.0


def test_polled_unit_that_stops_ends_the_journal_stream(monkeypatch):
    monkeypatch.setattr(logwatch, "JOURNAL_DRAIN_S", 0.01)
    states = iter([None, ExitInfo(1, "unit x failed: Result=exit-code ExecMainStatus=1")])
    follower = CommandFollower(
        ["sh", "-c", "echo line; exec sleep 30"],
        name="unit:x",
        exit_probe=lambda: next(states, None),
        watch_interval=0.05,
    )
    follower.poll_while_running = True
    collector = Collector(follower)
    assert collector.done.wait(COLLECT_TIMEOUT_S)
    assert collector.lines() == ["line"]
    assert follower.exit_info().exit_code == 1


def test_docker_exit_info_reads_exit_code_and_oom_flag(monkeypatch):
    monkeypatch.setattr(logwatch, "_run", lambda argv: "false 137 true")
    assert logwatch.docker_exit_info("sglang") == ExitInfo(
        137, "container exited: ExitCode=137 OOMKilled=true"
    )
    monkeypatch.setattr(logwatch, "_run", lambda argv: "true 0 false")
    assert logwatch.docker_exit_info("sglang") is None
    monkeypatch.setattr(logwatch, "_run", lambda argv: None)
    assert "gone" in logwatch.docker_exit_info("sglang").detail


def test_unit_exit_info_only_once_the_unit_stopped(monkeypatch):
    monkeypatch.setattr(logwatch, "_run", lambda argv: "active\nsuccess\n0")
    assert logwatch.unit_exit_info("sglang.service") is None
    monkeypatch.setattr(logwatch, "_run", lambda argv: "failed\nexit-code\n1")
    info = logwatch.unit_exit_info("sglang.service")
    assert info.exit_code == 1
    assert "Result=exit-code" in info.detail


def test_journal_follows_only_the_current_invocation(monkeypatch):
    monkeypatch.setattr(logwatch, "_run", lambda argv: "0123abcd")
    follower = logwatch.journal_follower("sglang.service")
    assert "_SYSTEMD_INVOCATION_ID=0123abcd" in follower.argv
    assert follower.poll_while_running
    monkeypatch.setattr(logwatch, "_run", lambda argv: None)
    assert logwatch.journal_follower("sglang.service").argv[-4:] == ["-u", "sglang.service", "-n", "0"]


def test_compose_follower_streams_the_service_without_prefixes():
    follower = logwatch.compose_follower(Path("compose.yaml"), "sglang")
    assert follower.argv == [
        "docker",
        "compose",
        "-f",
        "compose.yaml",
        "logs",
        "-f",
        "--no-log-prefix",
        "sglang",
    ]


@pytest.mark.docker
@pytest.mark.skipif(not docker_image_ready(), reason=f"needs docker and the {BASE_IMAGE} image")
def test_docker_follower_reads_a_real_container_and_its_exit_code():
    name = f"sglnode-logwatch-{uuid.uuid4().hex[:8]}"
    subprocess.run(
        [
            "docker",
            "run",
            "-d",
            "--name",
            name,
            BASE_IMAGE,
            "sh",
            "-c",
            "echo hello; echo oops >&2; exit 3",
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )
    try:
        follower = logwatch.docker_follower(name)
        collector = Collector(follower)
        assert collector.done.wait(30)
        assert sorted(collector.lines()) == ["hello", "oops"]
        assert follower.exit_info().exit_code == 3
    finally:
        subprocess.run(["docker", "rm", "-f", name], capture_output=True, timeout=60, check=False)


def test_skip_existing_starts_after_the_current_content_but_keeps_file_line_numbers(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("old 1\nold 2\npartial")
    collector = Collector(FileFollower(log, poll_interval=0.01, skip_existing=True))
    time.sleep(0.1)
    _append(log, " line\nnew\n")
    assert collector.wait_for(2) == ["partial line", "new"]
    assert [event.line_no for event in collector.events] == [3, 4]
    collector.close()
