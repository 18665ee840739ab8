"""Follow a server's log wherever it lives: a file, a container, a compose service, a unit's journal.

Every follower yields `LogEvent(timestamp, line_no, line)` (timestamp: `time.monotonic()` when the
line was read) until it is stopped or its stream ends, then `exit_info()` says how the process
ended when that is knowable (container exit code and OOM-kill flag, unit result).
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

# A file is polled this often: 50 ms keeps the fatal-line-to-diagnosis latency far under 1 s at
# negligible CPU cost (one stat + read per poll).
FILE_POLL_INTERVAL_S = 0.05
# A last line without its newline is emitted after this long unchanged (a crashing process may
# never write the newline).
PARTIAL_LINE_FLUSH_S = 0.3
READ_CHUNK_BYTES = 64 * 1024
UNIT_STATE_POLL_INTERVAL_S = 1.0
COMMAND_TIMEOUT_S = 10.0
# After a unit stops, journald may still be delivering its last lines; give it this long.
JOURNAL_DRAIN_S = 0.5


@dataclass(frozen=True)
class LogEvent:
    """One line read from a log."""

    timestamp: float
    line_no: int
    line: str


@dataclass(frozen=True)
class ExitInfo:
    """How the followed process ended."""

    exit_code: int | None
    detail: str


class FileFollower:
    """`tail -F` for one file: waits for it to appear, follows truncation and replacement."""

    def __init__(
        self, path: Path, poll_interval: float = FILE_POLL_INTERVAL_S, skip_existing: bool = False
    ) -> None:
        self.path = Path(path)
        self.name = str(path)
        self.poll_interval = poll_interval
        # Start after what the file already holds (an older run's lines), keeping line numbers
        # equal to the file's so they match `sglnode diagnose` on the same file.
        self.skip_existing = skip_existing

    def exit_info(self) -> ExitInfo | None:
        return None  # a file says nothing about the process that writes it

    def follow(self, stop: threading.Event) -> Iterator[LogEvent]:
        handle: BinaryIO | None = None
        inode: int | None = None
        position = 0
        pending = b""
        pending_since = 0.0
        line_no = 0
        skip = self.skip_existing
        try:
            while not stop.is_set():
                if handle is None:
                    handle, inode = self._open()
                    position, pending = 0, b""
                    if handle is None:
                        stop.wait(self.poll_interval)
                        continue
                    if skip:
                        position, line_no, pending = _skip_to_end(handle)
                        pending_since = time.monotonic()
                    skip = False  # a later (truncated or replaced) file is read from its start
                chunk = handle.read(READ_CHUNK_BYTES)
                if chunk:
                    position += len(chunk)
                    pending += chunk
                    pending_since = time.monotonic()
                    *complete, pending = pending.split(b"\n")
                    for raw in complete:
                        line_no += 1
                        yield LogEvent(time.monotonic(), line_no, _decode(raw))
                    continue
                if pending and time.monotonic() - pending_since >= PARTIAL_LINE_FLUSH_S:
                    line_no += 1
                    yield LogEvent(time.monotonic(), line_no, _decode(pending))
                    pending = b""
                if self._replaced_or_truncated(inode, position):
                    handle.close()
                    handle = None
                    continue
                stop.wait(self.poll_interval)
        finally:
            if handle is not None:
                handle.close()

    def _open(self) -> tuple[BinaryIO | None, int | None]:
        try:
            handle = self.path.open("rb")
        except FileNotFoundError:
            return None, None
        return handle, os.fstat(handle.fileno()).st_ino

    def _replaced_or_truncated(self, inode: int | None, position: int) -> bool:
        try:
            status = self.path.stat()
        except FileNotFoundError:
            return False  # keep reading the old file until a new one appears
        return status.st_ino != inode or status.st_size < position


class CommandFollower:
    """Follows the stdout+stderr of a command such as `docker logs -f NAME`."""

    def __init__(
        self,
        argv: list[str],
        name: str,
        exit_probe: Callable[[], ExitInfo | None] | None = None,
        watch_interval: float = UNIT_STATE_POLL_INTERVAL_S,
    ) -> None:
        self.argv = argv
        self.name = name
        # Called after the stream ends (docker) or polled while it runs (systemd units, whose
        # journal stream never ends by itself).
        self.exit_probe = exit_probe
        self.watch_interval = watch_interval
        self.poll_while_running = False
        self._exit: ExitInfo | None = None

    def exit_info(self) -> ExitInfo | None:
        return self._exit

    def follow(self, stop: threading.Event) -> Iterator[LogEvent]:
        process = subprocess.Popen(
            self.argv,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
        watcher = threading.Thread(target=self._watch, args=(process, stop), daemon=True)
        watcher.start()
        line_no = 0
        try:
            assert process.stdout is not None
            for raw in iter(process.stdout.readline, b""):
                line_no += 1
                yield LogEvent(time.monotonic(), line_no, _decode(raw.rstrip(b"\n")))
                if stop.is_set():
                    break
        finally:
            _terminate(process)
        if self._exit is None and self.exit_probe is not None and not stop.is_set():
            self._exit = self.exit_probe()
        if self._exit is None and not stop.is_set():
            self._exit = ExitInfo(exit_code=None, detail=f"log stream ended ({' '.join(self.argv[:3])} ...)")

    def _watch(self, process: subprocess.Popen[bytes], stop: threading.Event) -> None:
        """Stop the stream when asked to, or when a polled unit has stopped running."""
        while process.poll() is None:
            if stop.wait(self.watch_interval):
                _terminate(process)
                return
            if self.poll_while_running and self.exit_probe is not None:
                ended = self.exit_probe()
                if ended is not None:
                    self._exit = ended
                    time.sleep(JOURNAL_DRAIN_S)
                    _terminate(process)
                    return


def _skip_to_end(handle: BinaryIO) -> tuple[int, int, bytes]:
    """Read past the existing content: (bytes read, complete lines in it, trailing partial line)."""
    position, lines, tail = 0, 0, b""
    while chunk := handle.read(READ_CHUNK_BYTES):
        position += len(chunk)
        lines += chunk.count(b"\n")
        tail = (tail + chunk).rpartition(b"\n")[2]
    return position, lines, tail


def _terminate(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=COMMAND_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=COMMAND_TIMEOUT_S)


def _decode(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace").rstrip("\r")


def _run(argv: list[str]) -> str | None:
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=COMMAND_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError):
        return None
    return result.stdout.strip() if result.returncode == 0 else None


def docker_exit_info(container: str) -> ExitInfo | None:
    """Exit code and OOM-kill flag of a stopped container (None while it still runs)."""
    state = _run(
        ["docker", "inspect", "-f", "{{.State.Running}} {{.State.ExitCode}} {{.State.OOMKilled}}", container]
    )
    if state is None:
        return ExitInfo(exit_code=None, detail=f"container {container} is gone")
    running, code, oom_killed = state.split()
    if running == "true":
        return None
    return ExitInfo(exit_code=int(code), detail=f"container exited: ExitCode={code} OOMKilled={oom_killed}")


def unit_exit_info(unit: str) -> ExitInfo | None:
    """Result of a systemd unit that stopped (None while it is active or starting)."""
    state = _run(["systemctl", "show", "-p", "ActiveState,Result,ExecMainStatus", "--value", unit])
    if state is None:
        return None
    fields = state.split()
    if len(fields) != 3 or fields[0] in {"active", "activating", "reloading"}:
        return None
    active_state, result, status = fields
    code = int(status) if status.lstrip("-").isdigit() else None
    return ExitInfo(
        exit_code=code, detail=f"unit {unit} {active_state}: Result={result} ExecMainStatus={status}"
    )


def docker_follower(container: str) -> CommandFollower:
    return CommandFollower(
        ["docker", "logs", "-f", container],
        name=f"container:{container}",
        exit_probe=lambda: docker_exit_info(container),
    )


def compose_follower(compose_file: Path, service: str) -> CommandFollower:
    def exit_probe() -> ExitInfo | None:
        container = _run(["docker", "compose", "-f", str(compose_file), "ps", "-a", "-q", service])
        if not container:
            return ExitInfo(exit_code=None, detail=f"compose service {service} has no container")
        return docker_exit_info(container.splitlines()[0])

    return CommandFollower(
        ["docker", "compose", "-f", str(compose_file), "logs", "-f", "--no-log-prefix", service],
        name=f"compose:{service}",
        exit_probe=exit_probe,
    )


def journal_follower(unit: str) -> CommandFollower:
    """Follow only the unit's current invocation, so an older run's crash is never re-reported."""
    invocation = _run(["systemctl", "show", "-p", "InvocationID", "--value", unit])
    selector = (
        ["-n", "all", f"_SYSTEMD_INVOCATION_ID={invocation}"] if invocation else ["-u", unit, "-n", "0"]
    )
    follower = CommandFollower(
        ["journalctl", "-f", "-o", "cat", "--no-pager", *selector],
        name=f"unit:{unit}",
        exit_probe=lambda: unit_exit_info(unit),
    )
    follower.poll_while_running = True
    return follower
