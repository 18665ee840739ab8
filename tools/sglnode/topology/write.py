"""Write rendered files into a directory all together or not at all, keeping what a person edited.

`sglnode topology render --out DIR` stages every file in a temporary directory inside DIR (same
filesystem, so each move is one rename), checks every target first (a directory where a file goes,
a file where a directory goes), and moves files into place only when all are ready; a failure while
moving puts back what was there. A manifest of what was rendered (`.sglnode-render.json`: each
file's SHA-256) lets the next render tell a file sglnode wrote from one changed by hand since: those
are reported and kept, and nothing is written, unless `force`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sglnode.topology.render import RenderedFile

MANIFEST = ".sglnode-render.json"
MANIFEST_VERSION = 1
STAGING_PREFIX = ".sglnode-render-"


class WriteError(Exception):
    """Nothing was written; the message says why and what to change."""


@dataclass
class WriteResult:
    written: list[Path] = field(default_factory=list)  # replaced or created
    unchanged: list[Path] = field(default_factory=list)
    kept: list[Path] = field(default_factory=list)  # edited by hand, not overwritten (no force)
    overwritten_edits: list[Path] = field(default_factory=list)  # edited by hand, overwritten (force)

    @property
    def complete(self) -> bool:
        return not self.kept


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _read_manifest(root: Path) -> dict[str, str]:
    try:
        data = json.loads((root / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    files = data.get("files") if isinstance(data, dict) else None
    if not isinstance(files, dict):
        return {}
    return {str(k): str(v) for k, v in files.items()}


def _relative(path: str) -> Path:
    relative = Path(path)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        raise WriteError(f"refusing to write {path!r}: rendered paths stay inside the output directory")
    return relative


def _check_targets(root: Path, files: Iterable[RenderedFile]) -> None:
    """Every target can become a file: no directory in its place, no file where a directory must be."""
    if root.exists() and not root.is_dir():
        raise WriteError(f"{root} exists and is not a directory")
    problems = []
    for rendered in files:
        target = root / _relative(rendered.path)
        if target.is_symlink() or (target.exists() and not target.is_file()):
            problems.append(f"{target} is in the way: it is not a regular file (a directory or a link)")
            continue
        for parent in target.relative_to(root).parents:
            if parent == Path("."):
                continue
            where = root / parent
            if where.is_symlink() or (where.exists() and not where.is_dir()):
                problems.append(f"{where} is in the way: {target} needs it to be a directory")
                break
    if problems:
        raise WriteError("nothing written:\n" + "\n".join(f"  - {p}" for p in problems))


def write_atomically(root: Path, files: list[RenderedFile], *, force: bool = False) -> WriteResult:
    """Write every file or none; hand-edited files are kept (and nothing written) unless force."""
    _check_targets(root, files)
    manifest = _read_manifest(root) if root.is_dir() else {}
    result = WriteResult()
    plan: list[tuple[RenderedFile, Path, bytes]] = []
    for rendered in files:
        target = root / _relative(rendered.path)
        content = rendered.content.encode("utf-8")
        if target.exists():
            current = sha256(target.read_bytes())
            if current == sha256(content):
                if (target.stat().st_mode & 0o7777) == int(rendered.mode, 8):
                    result.unchanged.append(target)
                    continue
            elif manifest.get(rendered.path) != current:
                # Not what sglnode rendered last time (or never rendered by it): a person's edit.
                (result.overwritten_edits if force else result.kept).append(target)
                if not force:
                    continue
        plan.append((rendered, target, content))
    if result.kept:
        return result
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, dir=root))
    try:
        staged = _stage(staging, plan)
        _move_into_place(staging, staged)
        result.written = [target for _, target, _ in plan]
        _write_manifest(root, staging, files)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return result


def _stage(staging: Path, plan: list[tuple[RenderedFile, Path, bytes]]) -> list[tuple[Path, Path]]:
    staged = []
    for index, (rendered, target, content) in enumerate(plan):
        temporary = staging / f"{index}.new"
        with open(temporary, "wb") as handle:
            handle.write(content)
            handle.flush()
            os.fsync(handle.fileno())
        temporary.chmod(int(rendered.mode, 8))
        staged.append((temporary, target))
    return staged


def _move_into_place(staging: Path, staged: list[tuple[Path, Path]]) -> None:
    """Rename each staged file over its target; on any failure restore every target as it was."""
    done: list[tuple[Path, Path | None]] = []  # (target, backup of what it replaced, or None)
    created_dirs: list[Path] = []
    try:
        for index, (temporary, target) in enumerate(staged):
            created_dirs.extend(_make_parents(target.parent))
            backup = None
            if target.exists():
                backup = staging / f"{index}.old"
                os.link(target, backup)
            os.replace(temporary, target)
            done.append((target, backup))
    except OSError as exc:
        for target, backup in reversed(done):
            with contextlib.suppress(OSError):
                if backup is None:
                    target.unlink()
                else:
                    os.replace(backup, target)
        for directory in reversed(created_dirs):
            with contextlib.suppress(OSError):
                directory.rmdir()
        raise WriteError(f"nothing written: {exc}; every file was put back as it was") from exc


def _make_parents(directory: Path) -> list[Path]:
    missing = []
    current = directory
    while not current.exists():
        missing.append(current)
        current = current.parent
    for path in reversed(missing):
        path.mkdir()
    return list(reversed(missing))


def _write_manifest(root: Path, staging: Path, files: list[RenderedFile]) -> None:
    manifest = _read_manifest(root)
    manifest.update({f.path: sha256(f.content.encode("utf-8")) for f in files})
    document: dict[str, Any] = {
        "version": MANIFEST_VERSION,
        "about": "sglnode topology render: SHA-256 of each file as rendered, to tell hand edits apart",
        "files": dict(sorted(manifest.items())),
    }
    temporary = staging / "manifest.json"
    temporary.write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
    os.replace(temporary, root / MANIFEST)
