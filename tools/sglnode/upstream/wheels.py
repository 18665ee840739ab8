"""The pinned upstream wheels: download once from PyPI, check their sha256, read their source.

No upstream code is imported or run here: a wheel is a zip, and its Python files are read as text
(`WheelSource.read`). Running upstream code happens inside the real image (tools/oracle/).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path

import yaml

PINS_RESOURCE = "wheels.yaml"
CACHE_ENV = "SGLNODE_UPSTREAM_CACHE"
# tools/sglnode/upstream/wheels.py -> repository root; the cache lives in its gitignored .cache/.
REPO_ROOT = Path(__file__).resolve().parents[3]
DEFAULT_CACHE = REPO_ROOT / ".cache" / "upstream"
PIP_TIMEOUT_S = 600
# sglang-0.5.22-cp311-cp311-manylinux_2_34_x86_64.whl -> python tag, abi tag, platform tags
WHEEL_NAME_RE = re.compile(
    r"^(?P<name>[^-]+)-(?P<version>[^-]+)-(?P<python>[^-]+)-(?P<abi>[^-]+)-(?P<platform>[^-]+)\.whl$"
)
HASH_CHUNK = 1 << 20


class WheelError(RuntimeError):
    """A wheel could not be fetched, or is not the file that was pinned."""


@dataclass(frozen=True)
class Pin:
    project: str
    version: str
    file: str
    sha256: str


@cache
def pins() -> dict[str, Pin]:
    data = yaml.safe_load(resources.files("sglnode.upstream").joinpath(PINS_RESOURCE).read_text("utf-8"))
    return {
        project: Pin(project, str(entry["version"]), str(entry["file"]), str(entry["sha256"]))
        for project, entry in data.items()
    }


def pinned_version(project: str = "sglang") -> str:
    return pins()[project].version


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV) or DEFAULT_CACHE)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(HASH_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def _pip_download(requirement: str, file_hint: str | None, dest: Path) -> None:
    """`pip download` one wheel for the platform its pinned file name states (or this machine's)."""
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--disable-pip-version-check",
        "-d",
        str(dest),
    ]
    match = WHEEL_NAME_RE.match(file_hint or "")
    if match:
        python = match.group("python").split(".")[0]
        if python.startswith("cp") and python[2:].isdigit():
            command += ["--python-version", f"{python[2]}.{python[3:]}", "--implementation", "cp"]
        for platform in match.group("platform").split("."):
            command += ["--platform", platform]
        command += ["--abi", match.group("abi")]
    command.append(requirement)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise WheelError(f"pip download {requirement} failed: {exc}") from exc
    if result.returncode != 0:
        tail = (result.stderr or result.stdout).strip().splitlines()[-3:]
        raise WheelError(f"pip download {requirement} failed: {' / '.join(tail)}")


def pinned_wheel(project: str = "sglang", fetch: bool = True) -> Path:
    """The pinned wheel's path in the cache, downloaded first if needed; its sha256 is always checked."""
    pin = pins()[project]
    path = cache_dir() / pin.file
    if not path.is_file():
        if not fetch:
            raise WheelError(f"{pin.file} is not in {cache_dir()}: run `sglnode upstream fetch` (make setup)")
        path.parent.mkdir(parents=True, exist_ok=True)
        _pip_download(f"{project}=={pin.version}", pin.file, path.parent)
        if not path.is_file():
            raise WheelError(f"pip did not produce {pin.file} in {path.parent}")
    actual = sha256_of(path)
    if actual != pin.sha256:
        raise WheelError(f"{path}: sha256 {actual} is not the pinned {pin.sha256}; delete it and fetch again")
    return path


def release_wheel(project: str, version: str) -> Path:
    """Any release's wheel (for `sglnode upstream diff`): same platform as the pin, not hash-checked."""
    pin = pins()[project]
    match = WHEEL_NAME_RE.match(pin.file)
    assert match, pin.file
    normalized = project.replace("-", "_")
    dest = cache_dir() / "releases"
    for candidate in sorted(dest.glob(f"{normalized}-{version}-*.whl")):
        return candidate
    dest.mkdir(parents=True, exist_ok=True)
    _pip_download(f"{project}=={version}", pin.file.replace(pin.version, version), dest)
    found = sorted(dest.glob(f"{normalized}-{version}-*.whl"))
    if not found:
        raise WheelError(f"pip did not produce a {project} {version} wheel in {dest}")
    return found[0]


class WheelSource:
    """Text files inside a wheel (or an unpacked tree, for tests that mutate upstream source)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._zip = zipfile.ZipFile(path) if path.is_file() else None

    def read(self, member: str) -> str:
        if self._zip is not None:
            try:
                return self._zip.read(member).decode("utf-8")
            except KeyError as exc:
                raise FileNotFoundError(f"{member} is not in {self.path.name}") from exc
        return (self.path / member).read_text(encoding="utf-8")

    def names(self) -> list[str]:
        if self._zip is not None:
            return self._zip.namelist()
        return [str(p.relative_to(self.path)) for p in self.path.rglob("*") if p.is_file()]

    def close(self) -> None:
        if self._zip is not None:
            self._zip.close()

    def __enter__(self) -> WheelSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
