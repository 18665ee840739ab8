"""sglnode sim as a real process: startup, death by SIGKILL, faults, and PD through the real router."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from contextlib import contextmanager

import pytest

from sglnode.diagnosis.diagnose import diagnose_lines, numbered
from sglnode.readiness import loglines

START_TIMEOUT_S = 30
BOOTSTRAP_RE = re.compile(r"bootstrap server listening on [\d.]+:(?P<port>\d+)")
FLASH_TP4 = [
    "--model-path",
    "/models/DeepSeek-V4-Flash",
    "--tp-size",
    "4",
    "--host",
    "127.0.0.1",
    "--port",
    "0",
]


class SimProcess:
    """A `sglnode sim` child whose log lines are collected by a thread."""

    def __init__(self, args, **env):
        full_env = {**os.environ, "SGLNODE_SIM_STARTUP_S": "0.2", "SGLNODE_SIM_TIME_SCALE": "0.01", **env}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sglnode", "sim", "python3", "-m", "sglang.launch_server", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=full_env,
        )
        self.lines = []
        self._changed = threading.Condition()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self._changed:
                self.lines.append(line.rstrip("\n"))
                self._changed.notify_all()
        with self._changed:
            self._changed.notify_all()

    @property
    def log(self):
        return "\n".join(self.lines)

    def wait_for(self, regex, timeout=START_TIMEOUT_S):
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for line in self.lines:
                    match = regex.search(line)
                    if match:
                        return match
                remaining = deadline - time.monotonic()
                if remaining <= 0 or (self.proc.poll() is not None and self.proc.stdout.closed):
                    raise AssertionError(f"{regex.pattern!r} not seen; log:\n{self.log}")
                self._changed.wait(min(remaining, 0.2))

    def base_url(self):
        url = self.wait_for(loglines.UVICORN_RUNNING_RE).group("url")
        self.wait_for(loglines.SERVER_READY_RE)
        return url

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)


@contextmanager
def sim(args, **env):
    process = SimProcess(args, **env)
    try:
        yield process
    finally:
        process.stop()


def http(method, url, body=None, timeout=20):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(
        url, data=data, method=method, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_sim_serves_then_exits_cleanly_on_sigterm():
    with sim(FLASH_TP4) as process:
        base = process.base_url()
        status, body = http(
            "POST", base + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 3}}
        )
        assert status == 200 and json.loads(body)["meta_info"]["completion_tokens"] == 3
        assert "SIMULATED" in process.lines[0]
        process.stop()
        assert process.proc.returncode == 0


def test_config_that_does_not_fit_dies_like_sglang():
    with sim(["--model-path", "m", "--tp-size", "1", "--port", "0"]) as process:
        assert process.proc.wait(timeout=START_TIMEOUT_S) == -signal.SIGKILL
        process.wait_for(loglines.KILL_PROCESS_TREE_RE)
        assert not loglines.UVICORN_RUNNING_RE.search(process.log)
        diagnosis = diagnose_lines(numbered(process.lines))
        assert (diagnosis.cause, diagnosis.phase) == ("oom", "weights")


def test_crash_after_requests_kills_the_server_after_that_many():
    with sim(FLASH_TP4, SGLNODE_SIM_FAULT="crash_after_requests:2", SGLNODE_SIM_STARTUP_S="0") as process:
        base = process.base_url()  # the warmup request counts as the first
        status, _ = http("POST", base + "/generate", {"text": "hi", "sampling_params": {"max_new_tokens": 2}})
        assert status == 200
        assert process.proc.wait(timeout=10) == -signal.SIGKILL
        process.wait_for(loglines.KILL_PROCESS_TREE_RE)
        assert diagnose_lines(numbered(process.lines)).cause == "oom"


def test_crash_after_seconds():
    with sim(FLASH_TP4, SGLNODE_SIM_FAULT="crash_after_s:0.3") as process:
        process.base_url()
        assert process.proc.wait(timeout=10) == -signal.SIGKILL
        assert "injecting a crash (crash_after_s:0.3)" in process.log


def test_hang_never_listens():
    with sim(FLASH_TP4, SGLNODE_SIM_FAULT="hang") as process:
        process.wait_for(loglines.LOAD_WEIGHT_BEGIN_RE)
        time.sleep(1.0)
        assert process.proc.poll() is None
        assert not loglines.UVICORN_RUNNING_RE.search(process.log)
        process.proc.send_signal(signal.SIGTERM)  # a hung server still stops on SIGTERM
        assert process.proc.wait(timeout=10) == 128 + signal.SIGTERM


@pytest.mark.slow
@pytest.mark.parametrize("decode_fault", ["", "kv_transfer_fail"])
def test_pd_through_the_real_sglang_router(decode_fault):
    prefill_args = [*FLASH_TP4, "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "0"]
    decode_args = [*FLASH_TP4, "--disaggregation-mode", "decode"]
    with sim(prefill_args) as prefill, sim(decode_args, SGLNODE_SIM_FAULT=decode_fault) as decode:
        prefill_url, decode_url = prefill.base_url(), decode.base_url()
        bootstrap = prefill.wait_for(BOOTSTRAP_RE).group("port")
        port, metrics_port = free_port(), free_port()
        router = subprocess.Popen(
            [
                sys.executable, "-m", "sglang_router.launch_router", "--pd-disaggregation",
                "--prefill", prefill_url, bootstrap, "--decode", decode_url,
                "--host", "127.0.0.1", "--port", str(port),
                "--prometheus-host", "127.0.0.1", "--prometheus-port", str(metrics_port),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            base = f"http://127.0.0.1:{port}"
            deadline = time.monotonic() + START_TIMEOUT_S
            workers = ""
            while time.monotonic() < deadline and workers.count('"is_healthy":true') < 2:
                time.sleep(0.3)
                try:
                    workers = http("GET", base + "/workers", timeout=2)[1]
                except OSError:
                    workers = ""
            assert workers.count('"is_healthy":true') == 2, workers
            body = {"text": "hello", "sampling_params": {"max_new_tokens": 5}}
            status, text = http("POST", base + "/generate", body)
            chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
            chat_status, chat_text = http("POST", base + "/v1/chat/completions", chat)
            if decode_fault:
                assert status >= 500 and "KVTransferError" in text
                assert http("GET", decode_url + "/health")[0] == 200
                assert http("GET", prefill_url + "/health")[0] == 200
            else:
                assert status == 200, text
                assert json.loads(text)["meta_info"]["completion_tokens"] == 5
                assert chat_status == 200 and json.loads(chat_text)["usage"]["completion_tokens"] == 3
                # The router really went through PD: the decode side saw the bootstrap room.
                assert "POST /generate" in prefill.log and "POST /generate" in decode.log
        finally:
            router.terminate()
            router.wait(timeout=10)


def _wait_cli(url, log_path):
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "sglnode",
            "wait",
            "--url",
            url,
            "--log",
            str(log_path),
            "--timeout",
            "30",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize(
    ("env", "args", "exit_code", "phase"),
    [
        ({}, ["--tp-size", "4"], 0, None),
        (
            {"SGLNODE_SIM_GPU": "h200", "SGLNODE_SIM_MODEL": "deepseek-v4-pro-fp8"},
            ["--tp-size", "8", "--mem-fraction-static", "0.88"],
            2,
            "kv_cache",
        ),
    ],
)
def test_sglnode_wait_reads_the_sim_like_sglang(tmp_path, env, args, exit_code, phase):
    port = free_port()
    log_path = tmp_path / "server.log"
    full_env = {**os.environ, "SGLNODE_SIM_STARTUP_S": "1", **env}
    with log_path.open("w") as log_file:
        server = subprocess.Popen(
            [sys.executable, "-m", "sglnode", "sim", "--model-path", "m", "--port", str(port), *args],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env=full_env,
        )
        try:
            result = _wait_cli(f"http://127.0.0.1:{port}", log_path)
        finally:
            server.terminate()
            server.wait(timeout=10)
    assert result.returncode == exit_code, result.stdout + result.stderr
    report = json.loads(result.stdout)
    if phase:
        assert report["outcome"] == "crashed"
        assert (report["diagnosis"]["cause"], report["diagnosis"]["phase"]) == ("oom", phase)
