"""Whether the Docker-marked tests can run here: a docker CLI and the local base image."""

from __future__ import annotations

import shutil
import subprocess

BASE_IMAGE = "sglnode/debian:bookworm"
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
