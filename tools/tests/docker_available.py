"""Docker helpers of the tests: is an image here, which ports are free, the built sglang image."""

from __future__ import annotations

import shutil
import socket
import subprocess
from pathlib import Path

BASE_IMAGE = "sglnode/debian:bookworm"
SGLANG_IMAGE_TAG_FILE = Path(__file__).resolve().parents[2] / ".cache" / "sglang-image.tag"
DOCKER_PROBE_TIMEOUT_S = 30


def docker_image_ready(image: str = BASE_IMAGE) -> bool:
    if shutil.which("docker") is None:
        return False
    try:
        probe = subprocess.run(
            ["docker", "image", "inspect", image],
            capture_output=True,
            timeout=DOCKER_PROBE_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return False
    return probe.returncode == 0


def image_present(ref: str) -> bool:
    return docker_image_ready(ref)


def free_ports(count: int) -> list[int]:
    """Ports nothing listens on right now (bound and released: a best effort, as always)."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def built_sglang_image() -> str:
    """The tag `make image` built (.cache/sglang-image.tag), present in the engine; else skip (which
    `make test` turns into a failure with SGLNODE_FORBID_SKIPS)."""
    import pytest  # noqa: PLC0415 - this module is also imported outside pytest runs

    if not SGLANG_IMAGE_TAG_FILE.is_file():
        pytest.skip("no sglang image built here: run `make image` (make test builds it first)")
    tag = SGLANG_IMAGE_TAG_FILE.read_text(encoding="utf-8").strip()
    if not image_present(tag):
        pytest.skip(
            f"{tag} (from {SGLANG_IMAGE_TAG_FILE}) is not in the local Docker engine: run `make image`"
        )
    return tag
