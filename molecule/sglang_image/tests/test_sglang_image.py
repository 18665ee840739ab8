"""What the sglang_image role must leave: images tagged by their inputs, built by both BuildKit paths.

The instance drives the host's Docker engine, so images are inspected with the host's docker CLI. The
two images come from the scenario's fixture Dockerfile (test fixture, no SGLang inside): one built with
the classic CLI's BuildKit, one with the (stand-in) buildx plugin the node has.
"""

import json
import re
import subprocess
import sys
from pathlib import Path

# This checkout's pins (tools/sglnode/pins.yaml), whichever sglnode the venv has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
from sglnode.pins import PINS

BUILD_DIR = "/var/lib/sglnode/build/sglang-image"
WHEEL = f"flash_attn-{PINS.flash_attn}-cp311-cp311-linux_x86_64.whl"
BUILDX_LOG = "/var/log/fixture-docker-buildx.log"
DOCKER_TIMEOUT_S = 60
TAG = re.compile(rf"^{re.escape(PINS.sglang_image_versions)}-[0-9a-f]{{12}}$")


def _docker(*args):
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=True
    ).stdout


def _image(builder):
    repository = f"sglnode-molecule/sglang-sm120-{builder}"
    refs = _docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", repository)
    assert len(refs.split()) == 1, refs
    return refs.strip()


def _labels(ref):
    return json.loads(_docker("image", "inspect", "--format", "{{json .Config.Labels}}", ref))


def _recorded(ref, name):
    return _docker("run", "--rm", ref, "cat", f"/opt/sglnode/{name}")


def test_each_builder_left_one_image_tagged_by_its_inputs():
    for builder in ("classic", "buildx"):
        tag = _image(builder).split(":", 1)[1]
        assert TAG.match(tag)
        assert _labels(_image(builder))["io.sglnode.inputs-digest"].startswith(tag.rsplit("-", 1)[1])


def test_a_different_switch_gave_a_different_tag():
    # The buildx build had ENABLE_MOONCAKE=1; converge also checked that the role and make image give
    # the same tag for the same inputs.
    assert _image("classic").split(":")[1] != _image("buildx").split(":")[1]


def test_buildx_path_went_through_the_plugin_and_classic_did_not(host):
    calls = host.file(BUILDX_LOG).content_string.splitlines()
    builds = [call for call in calls if call.startswith("build ")]
    assert len(builds) == 1, calls  # converge built once; idempotence found the tag
    assert "sglnode-molecule/sglang-sm120-buildx:" in builds[0]
    assert "sglang-sm120-classic" not in "\n".join(calls)


def test_labels_and_build_args_reached_the_build():
    for builder in ("classic", "buildx"):
        ref = _image(builder)
        labels = _labels(ref)
        assert labels["org.opencontainers.image.version"] == PINS.sglang
        assert labels["org.opencontainers.image.revision"] == "molecule"
        assert labels["org.opencontainers.image.base.name"] == "sglnode/debian:bookworm"
        assert labels["io.sglnode.built-by"] == "ansible role sglang_image"
        recorded = dict(line.split("=", 1) for line in _recorded(ref, "build-args.txt").split())
        assert recorded["SGLANG_VERSION"] == PINS.sglang
        assert recorded["TORCH_VERSION"] == PINS.torch
        assert recorded["CUDA_VERSION"] == PINS.cuda_wheels.rsplit(".", 1)[0]
        assert recorded["ENABLE_NIXL"] == "1"
        assert recorded["ENABLE_MOONCAKE"] == {"classic": "0", "buildx": "1"}[builder]
        assert recorded["FLASH_ATTN_VERSION"] == PINS.flash_attn
        assert int(recorded["MAX_JOBS"]) >= 1


def test_the_wheel_reached_both_builds_and_the_ca_secret_only_the_one_given_it():
    for builder in ("classic", "buildx"):
        assert _recorded(_image(builder), "wheelhouse.txt").split() == [WHEEL]
    assert _recorded(_image("buildx"), "extra-ca.txt").strip() == "present"
    assert _recorded(_image("classic"), "extra-ca.txt").strip() == "absent"


def test_build_context_holds_exactly_the_requested_wheel(host):
    assert host.file(f"{BUILD_DIR}/Dockerfile").exists
    assert host.file(f"{BUILD_DIR}/image_tag.py").exists
    wheels = host.check_output(f"ls {BUILD_DIR}/wheelhouse").split()
    assert wheels == [WHEEL]
    wheel = host.file(f"{BUILD_DIR}/wheelhouse/{WHEEL}")
    assert wheel.mode == 0o644
    assert wheel.user == "root"
