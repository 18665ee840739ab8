"""What the sglang_image role must leave: a tagged, labelled image on the engine and the staged context.

The instance drives the host's Docker engine, so the image is inspected with the host's docker CLI.
The image is built from the scenario's fixture Dockerfile (test fixture, no SGLang inside).
"""

import json
import subprocess

IMAGE = "sglnode-molecule/sglang-sm120:0.5.23-cu130-torch2.14.1"
BUILD_DIR = "/var/lib/sglnode/build/sglang-image"
WHEEL = "flash_attn-2.8.3-cp312-cp312-linux_x86_64.whl"
DOCKER_TIMEOUT_S = 60


def _docker(*args):
    return subprocess.run(
        ["docker", *args], capture_output=True, text=True, timeout=DOCKER_TIMEOUT_S, check=True
    ).stdout


def _labels():
    return json.loads(_docker("image", "inspect", "--format", "{{json .Config.Labels}}", IMAGE))


def test_image_is_tagged_with_the_version_tuple():
    tags = _docker("image", "ls", "--format", "{{.Repository}}:{{.Tag}}", "sglnode-molecule/sglang-sm120")
    assert tags.split() == [IMAGE]


def test_role_labels_carry_the_version_tuple():
    labels = _labels()
    assert labels["io.sglnode.image.tuple"] == "0.5.23-cu130-torch2.14.1"
    assert labels["io.sglnode.sglang.version"] == "0.5.23"
    assert labels["io.sglnode.torch.version"] == "2.14.1"
    assert labels["io.sglnode.cuda.version"] == "13.0.2"


def test_dockerfile_labels_got_the_build_args():
    labels = _labels()
    assert labels["org.opencontainers.image.version"] == "0.5.23"
    assert labels["org.opencontainers.image.revision"] == "molecule"
    # Inherited from the stand-in base: the image was built FROM the CUDA base the role was given.
    assert labels["io.sglnode.test-fixture"] == "true"


def test_build_args_reached_the_build():
    recorded = dict(
        line.split("=", 1)
        for line in _docker("run", "--rm", IMAGE, "cat", "/opt/sglnode/build-args.txt").split()
    )
    assert recorded["SGLANG_VERSION"] == "0.5.23"
    assert recorded["TORCH_VERSION"] == "2.14.1"
    assert recorded["FLASHINFER_VERSION"] == "0.7.2"
    assert recorded["SGLANG_KERNEL_VERSION"] == "0.4.10"
    assert recorded["ENABLE_NIXL"] == "1"
    assert recorded["ENABLE_MOONCAKE"] == "0"
    assert recorded["ENABLE_DEEPEP"] == "0"
    assert recorded["FLASH_ATTN_VERSION"] == "2.8.3"
    assert int(recorded["MAX_JOBS"]) >= 1


def test_flash_attn_wheel_from_the_wheelhouse_reached_the_image():
    listing = _docker("run", "--rm", IMAGE, "ls", "/opt/sglnode/wheelhouse")
    assert WHEEL in listing.split()


def test_build_context_is_staged_on_the_node(host):
    assert host.file(f"{BUILD_DIR}/Dockerfile").exists
    wheel = host.file(f"{BUILD_DIR}/wheelhouse/{WHEEL}")
    assert wheel.exists
    assert wheel.mode == 0o644
    assert wheel.user == "root"
