"""images/sglang/image_tag.py: the tag follows every input of the build and nothing else."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

from sglnode.pins import PINS

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTEXT = REPO_ROOT / "images" / "sglang"

_spec = importlib.util.spec_from_file_location("image_tag", CONTEXT / "image_tag.py")
image_tag = importlib.util.module_from_spec(_spec)
sys.modules["image_tag"] = image_tag
_spec.loader.exec_module(image_tag)
# The build args the builders take from tools/sglnode/pins.yaml (the Dockerfile has no defaults for them).
PINNED_ARGS = {"BASE_IMAGE": PINS.base_image, "CUDA_ARCH": PINS.gpu.cuda_arch, "DEEPEP_REF": PINS.deepep}
NAME = PINS.images.sglang


@pytest.fixture
def context(tmp_path: Path) -> Path:
    """A copy of the real build context, to change one input at a time."""
    copy = tmp_path / "sglang"
    shutil.copytree(CONTEXT, copy, ignore=shutil.ignore_patterns("__pycache__", "*.whl"))
    return copy


def _describe(context: Path, **args: str) -> dict:
    return image_tag.describe(context, {**PINNED_ARGS, **args}, NAME)


def _tag(context: Path, **args: str) -> str:
    return _describe(context, **args)["tag"]


def test_tag_names_the_locked_versions_and_a_digest(context):
    tag = _tag(context)
    versions, digest = tag.rsplit("-", 1)
    assert versions == PINS.sglang_image_versions  # the lock resolves the pins
    assert len(digest) == 12 and int(digest, 16) >= 0
    assert _describe(context)["ref"] == f"{PINS.sglang_image}-{digest}"


def test_pinned_build_args_have_no_default_and_must_be_given(context):
    for missing in PINNED_ARGS:
        given = {key: value for key, value in PINNED_ARGS.items() if key != missing}
        with pytest.raises(SystemExit, match=f"must be given: {missing}"):
            image_tag.describe(context, given, NAME)


def test_identical_inputs_give_the_same_tag_and_defaults_may_be_spelled_out(context):
    assert _tag(context) == _tag(context)
    assert _tag(context) == _tag(context, ENABLE_NIXL="1", ENABLE_MOONCAKE="0")


@pytest.mark.parametrize(
    "args",
    [
        {"ENABLE_MOONCAKE": "1"},
        {"ENABLE_NIXL": "0"},
        {"ENABLE_DEEPEP": "1"},
        {"BASE_IMAGE": "sglnode/debian:bookworm"},
        {"CUDA_ARCH": "9.0a"},
        {"FLASH_ATTN_VERSION": PINS.flash_attn},
    ],
)
def test_any_content_build_arg_changes_the_tag(context, args):
    assert _tag(context, **args) != _tag(context)


def test_label_only_args_do_not_change_the_tag(context):
    assert _tag(context, IMAGE_REVISION="abc123", MAX_JOBS="2", SGLANG_VERSION="x") == _tag(context)


@pytest.mark.parametrize("name", ["requirements.lock", "Dockerfile", "cuda-home.sh", "kernel_audit.py"])
def test_a_changed_context_file_changes_the_tag(context, name):
    before = _tag(context)
    with (context / name).open("a") as handle:
        handle.write("\n# changed\n")
    assert _tag(context) != before


def test_a_wheel_in_the_wheelhouse_changes_the_tag_and_files_outside_the_context_do_not(context):
    before = _tag(context)
    (context / "README.md").write_text("documentation is not sent to the builder\n")
    (context / "notes.txt").write_text("not admitted by .dockerignore\n")
    assert _tag(context) == before
    wheel = f"flash_attn-{PINS.flash_attn}-cp311-cp311-linux_x86_64.whl"
    (context / "wheelhouse" / wheel).write_bytes(b"wheel")
    assert _tag(context) != before


def test_hashed_files_are_exactly_what_the_builder_receives(context):
    files = set(_describe(context)["files"])
    assert files == {
        "Dockerfile",
        "requirements.lock",
        "install-lock.sh",
        "cuda-home.sh",
        "smoke.sh",
        "kernel_audit.py",
        "audit-required.yaml",
    }


def test_label_args_carry_the_versions_and_the_digest(context):
    described = _describe(context)
    assert described["label_args"] == {
        "SGLANG_VERSION": PINS.sglang,
        "TORCH_VERSION": PINS.torch,
        "CUDA_VERSION": PINS.cuda_wheels.rsplit(".", 1)[0],  # major.minor.patch
        "INPUTS_DIGEST": described["digest"],
    }


def test_unknown_build_args_and_a_non_whitelist_dockerignore_are_refused(context):
    with pytest.raises(SystemExit, match="ENABLE_WARP"):
        _describe(context, ENABLE_WARP="1")
    (context / ".dockerignore").write_text("*.md\n")
    with pytest.raises(SystemExit, match="whitelist"):
        _describe(context)


def test_cli_prints_the_reference_and_rejects_bad_args(context, capsys):
    pinned = [f"--build-arg={key}={value}" for key, value in PINNED_ARGS.items()]
    assert image_tag.main([str(context), *pinned, "--build-arg", "ENABLE_MOONCAKE=1", "--name", "x/y"]) == 0
    assert capsys.readouterr().out.startswith(f"x/y:{PINS.sglang_image_versions}-")
    assert image_tag.main([str(context), "--name", "x/y", "--build-arg", "novalue"]) == 64
    assert image_tag.main([str(context), *pinned]) == 64  # no --name
