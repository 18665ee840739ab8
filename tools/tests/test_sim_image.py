"""images/sim: build.sh builds the simulator image (classic builder); the container serves like SGLang."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

import pytest
from image_build import BUILD_TIMEOUT_S, build_with_script, docker

from sglnode import __version__
from sglnode.pins import PINS

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "images" / "sim" / "build.sh"
TAG = PINS.sim_image
SIM_UID = "10002"  # images/sim/Dockerfile ARG SIM_UID
READY_TIMEOUT_S = 60
SGLANG_PORT = PINS.ports.sglang
SIM_ARGS = [
    "python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/models/DeepSeek-V4-Flash",
    "--tp-size",
    "4",
]

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(shutil.which("docker") is None, reason="docker CLI not found"),
]


@pytest.fixture(scope="module")
def sim_image() -> str:
    return build_with_script(BUILD_SCRIPT, TAG)


def test_image_is_labelled_as_a_test_double(sim_image):
    labels = json.loads(docker("image", "inspect", "--format", "{{json .Config.Labels}}", sim_image).stdout)
    assert labels["io.sglnode.test-double"] == "true"
    assert "TEST DOUBLE" in labels["org.opencontainers.image.description"]
    assert labels["org.opencontainers.image.version"] == __version__


def test_runs_as_non_root_without_the_build_ca(sim_image):
    result = docker("run", "--rm", "--entrypoint", "sh", sim_image, "-c", "id -u; ls -A /tmp")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[0] == SIM_UID
    assert "extra-ca.crt" not in result.stdout and "pip-ca-bundle.crt" not in result.stdout
    assert not (BUILD_SCRIPT.parent / "extra-ca.crt").exists()
    assert not (BUILD_SCRIPT.parent / "dist").exists()


def test_second_build_skips_when_nothing_changed(sim_image):
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=BUILD_TIMEOUT_S, check=False
    )
    assert result.returncode == 0
    # Other files of the package may change between two builds; then it must rebuild, never reuse.
    assert "skipping build" in result.stdout or "rebuilding" in result.stdout


def test_container_serves_sglang_api_on_a_published_loopback_port(sim_image):
    name = f"sglnode-sim-test-{uuid.uuid4().hex[:8]}"
    run = docker(
        "run", "-d", "--name", name, "-p", f"127.0.0.1::{SGLANG_PORT}",
        "-e", "SGLNODE_SIM_STARTUP_S=0.2", "-e", "SGLNODE_SIM_TIME_SCALE=0.01",
        sim_image, *SIM_ARGS, "--host", "0.0.0.0", "--port", str(SGLANG_PORT),
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    try:
        host_port = docker("port", name, str(SGLANG_PORT)).stdout.strip().rsplit(":", 1)[1]
        base = f"http://127.0.0.1:{host_port}"
        deadline = time.monotonic() + READY_TIMEOUT_S
        status = 0
        while time.monotonic() < deadline and status != 200:
            time.sleep(0.3)
            try:
                with urllib.request.urlopen(base + "/health", timeout=2) as response:
                    status = response.status
            except (urllib.error.URLError, ConnectionError, OSError):
                status = 0
        assert status == 200, docker("logs", name).stderr[-3000:]
        with urllib.request.urlopen(base + "/server_info", timeout=5) as response:
            info = json.loads(response.read())
        assert info["simulated"] is True and info["tp_size"] == 4
        logs = docker("logs", name)
        assert "The server is fired up and ready to roll!" in logs.stdout + logs.stderr
    finally:
        docker("rm", "-f", name)


def test_container_with_a_config_that_does_not_fit_exits_non_zero(sim_image):
    result = docker(
        "run", "--rm", "-e", "SGLNODE_SIM_STARTUP_S=0", sim_image,
        "python3", "-m", "sglang.launch_server", "--model-path", "m", "--tp-size", "1",
    )  # fmt: skip
    assert result.returncode == 137  # SIGKILL from kill_process_tree, as SGLang's launcher ends
    assert "kill_process_tree called" in result.stdout + result.stderr
