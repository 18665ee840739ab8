"""The quoted-source fixtures (library messages, engines' phase evidence, whole records): every yaml file
of a folder, entry by entry, each with an id naming its file, its index and its library; and the check that
a quoted traceback's SGLang frames are the pinned wheel's."""

import re
from collections.abc import Callable
from pathlib import Path

import yaml

# A traceback frame in the installed SGLang ("File ".../site-packages/sglang/srt/x.py", line 12, in f").
SGLANG_FRAME_RE = re.compile(r'File "[^"]*/site-packages/(sglang/[^"]+\.py)", line (\d+), in (\S+)$')


def quoted_entries(folder: Path) -> list[dict]:
    entries = []
    for path in sorted(folder.glob("*.yaml")):
        for index, entry in enumerate(yaml.safe_load(path.read_text(encoding="utf-8"))):
            entries.append({**entry, "_id": f"{path.stem}-{index}-{entry['library']}"})
    return entries


def rendered_lines(entry: dict) -> list[str]:
    """A whole quoted record (`rendered`, several lines) as the log lines it is."""
    return entry["rendered"].rstrip("\n").split("\n")


def drifted_sglang_frames(
    read: Callable[[str], str], entry_id: str, lines: list[str], require_frames: bool = True
) -> list[str]:
    """The SGLang frames of a quoted traceback that the pinned wheel does not have: the function is not
    defined in that file, or the source line printed under the frame is not that line of the file. A
    traceback with no SGLang frame at all is reported too (it cannot have been checked), unless the
    entry is a record that may be log lines only (`require_frames=False`). `read` returns a wheel file's
    text (the callers pass a cached WheelSource.read: many frames share a file)."""
    drifted, frames = [], 0
    for index, line in enumerate(lines):
        frame = SGLANG_FRAME_RE.search(line)
        if not frame:
            continue
        frames += 1
        path, line_no, function = frame.group(1), int(frame.group(2)), frame.group(3)
        text = read(path)
        source = text.splitlines()
        defined = function.startswith("<") or re.search(rf"\bdef {re.escape(function)}\(", text)
        printed = lines[index + 1].strip() if index + 1 < len(lines) else ""
        if not defined or line_no > len(source) or source[line_no - 1].strip() != printed:
            drifted.append(f"{entry_id}: {path}:{line_no} in {function}: {printed[:60]}")
    if not frames and require_frames:
        drifted.append(f"{entry_id}: no SGLang frame")
    return drifted
