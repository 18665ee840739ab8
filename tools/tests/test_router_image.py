"""images/router: build.sh builds the real sglang-router image (classic builder); it skips a tag built
from the same sources and rebuilds one built from other sources."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from image_build import RUN_TIMEOUT_S, build_with_script, docker

from sglnode.pins import PINS

REPO_ROOT = Path(__file__).resolve().parents[2]
BUILD_SCRIPT = REPO_ROOT / "images" / "router" / "build.sh"
ROUTER_VERSION = PINS.sglang_router  # tools/sglnode/pins.yaml (also synced into requirements/toolchain.txt)
TAG = PINS.router_image
ROUTER_UID = "10001"  # images/router/Dockerfile ARG ROUTER_UID

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(shutil.which("docker") is None, reason="docker CLI not found"),
]


@pytest.fixture(scope="module")
def router_image() -> str:
    return build_with_script(BUILD_SCRIPT, TAG)


def test_launch_router_help_runs_in_the_image(router_image):
    result = docker("run", "--rm", router_image, "python3", "-m", "sglang_router.launch_router", "--help")
    assert result.returncode == 0, result.stderr
    assert "--worker-urls" in result.stdout
    assert "--pd-disaggregation" in result.stdout


def test_router_runs_as_a_non_root_user(router_image):
    result = docker("run", "--rm", router_image, "id", "-u")
    assert result.stdout.strip() == ROUTER_UID


def test_build_ca_stays_out_of_the_image_and_the_context(router_image):
    result = docker("run", "--rm", router_image, "ls", "-A", "/tmp")
    assert result.returncode == 0
    assert "extra-ca.crt" not in result.stdout
    assert "pip-ca-bundle.crt" not in result.stdout
    assert not (BUILD_SCRIPT.parent / "extra-ca.crt").exists()


def test_image_is_labelled_with_the_router_version(router_image):
    labels = json.loads(
        docker("image", "inspect", "--format", "{{json .Config.Labels}}", router_image).stdout
    )
    assert labels["org.opencontainers.image.version"] == ROUTER_VERSION
    assert labels["io.sglnode.sglang-router.version"] == ROUTER_VERSION


def test_second_build_skips_the_existing_tag(router_image):
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT)], capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False
    )
    assert result.returncode == 0
    assert f"{router_image} exists (sources " in result.stdout and "skipping build" in result.stdout
    recorded = docker(
        "image", "inspect", "--format", '{{ index .Config.Labels "io.sglnode.source-hash" }}', router_image
    ).stdout.strip()
    assert len(recorded) == 16 and recorded in result.stdout


def test_an_edited_build_context_is_rebuilt_not_skipped(router_image, tmp_path):
    # A copy of the scripts with one more line in the Dockerfile: same tag, other sources. A copy, so
    # the real image is untouched; `docker build` is not reached (the fake docker on PATH records it).
    copy = tmp_path / "repo"
    shutil.copytree(REPO_ROOT / "images", copy / "images", ignore=shutil.ignore_patterns("extra-ca.crt"))
    shutil.copytree(REPO_ROOT / "tools" / "sglnode", copy / "tools" / "sglnode",
                    ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
    dockerfile = copy / "images" / "router" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "# edited\n")
    fake_bin = tmp_path / "bin"
    fake_bin.mkdir()
    calls = tmp_path / "docker-calls"
    real_label = docker(
        "image", "inspect", "--format", '{{ index .Config.Labels "io.sglnode.source-hash" }}', router_image
    ).stdout.strip()
    (fake_bin / "docker").write_text(
        f'#!/bin/sh\necho "$*" >> {calls}\ncase "$1 $2" in "image inspect") echo {real_label};; esac\n'
    )
    (fake_bin / "docker").chmod(0o755)
    env = {"PATH": f"{fake_bin}:/usr/bin:/bin", "HOME": str(tmp_path)}
    result = subprocess.run(
        ["bash", str(copy / "images" / "router" / "build.sh")],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False, env=env,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert f"was built from other sources ({real_label}); rebuilding" in result.stdout
    build_calls = [line for line in calls.read_text().splitlines() if line.startswith("build ")]
    assert len(build_calls) == 1 and "SGLNODE_SOURCE_HASH=" in build_calls[0]
    assert real_label not in build_calls[0]
