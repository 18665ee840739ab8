"""The one reader of YAML and JSON input files in the topology, planning and sim code: bounded and safe.

A topology is hand-written, short data, so anything that is not (a file of megabytes, a YAML alias
bomb whose 1 KB expands to gigabytes when walked, binary or non-UTF-8 bytes, a nesting a thousand
levels deep, a key given twice) is refused with a message that says what to change, never a
traceback. YAML goes through libyaml (`yaml.CSafeLoader`: only plain data, no Python objects) after
one streaming pass over its parse events that counts aliases, the nodes they expand to and depth,
before anything is built.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

# libyaml when PyYAML was built with it (the pinned wheel is); the pure-Python loader otherwise.
SAFE_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# A topology is a few kilobytes (the shipped ones are under 2 KiB); 1 MiB leaves room for generous
# comments while keeping a load under a second.
MAX_TOPOLOGY_BYTES = 1 << 20
# Model and GPU presets, config.json files and kernel audits shipped with sglnode are tens of KiB.
MAX_DATA_BYTES = 4 << 20
# Anchors and aliases have honest uses (a shared `args:` block), a few of them; an alias bomb needs
# many. Expanded nodes bound what a walk over the loaded data costs, whatever the alias shape.
MAX_ALIASES = 64
MAX_EXPANDED_NODES = 100_000
MAX_DEPTH = 32


class InputFileError(ValueError):
    """A file that cannot be read as the data it should hold; the message names the file and the fix."""


def _size_text(size: int) -> str:
    return f"{size / (1 << 20):.1f} MiB" if size >= 1 << 20 else f"{size} bytes"


def read_text(path: str | Path, *, what: str, max_bytes: int) -> str:
    """The file's text, refusing what is not a regular, bounded, UTF-8 text file."""
    where = f"{what} {path}"
    try:
        info = os.stat(path)
    except OSError as exc:
        raise InputFileError(f"cannot read {where}: {exc.strerror or exc}") from exc
    if stat.S_ISDIR(info.st_mode):
        raise InputFileError(f"cannot read {where}: it is a directory, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise InputFileError(f"cannot read {where}: it is not a regular file")
    if info.st_size > max_bytes:
        raise InputFileError(
            f"{where} is {_size_text(info.st_size)}, more than the {_size_text(max_bytes)} a {what} may be"
        )
    try:
        with open(path, "rb") as handle:
            data = handle.read(max_bytes + 1)  # the file may have grown since stat
    except OSError as exc:
        raise InputFileError(f"cannot read {where}: {exc.strerror or exc}") from exc
    if len(data) > max_bytes:
        raise InputFileError(f"{where} is more than the {_size_text(max_bytes)} a {what} may be")
    return decode_text(data, where)


def decode_text(data: bytes, where: str) -> str:
    if b"\x00" in data:
        raise InputFileError(f"{where} is binary (it contains NUL bytes), not a text file")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputFileError(
            f"{where} is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start}); "
            "save it as UTF-8"
        ) from exc


@dataclass
class _Collection:
    kind: str  # "mapping" | "sequence"
    anchor: str | None
    start: int  # expanded-node count when it opened
    keys: set[str] = field(default_factory=set)
    expecting_key: bool = True


class _Budget:
    """One streaming pass over parse events: aliases, expanded size, depth and duplicate keys."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.aliases = 0
        self.expanded = 0
        self.anchors: dict[str, int] = {}
        self.stack: list[_Collection] = []

    def fail(self, event: yaml.Event, message: str) -> InputFileError:
        mark = event.start_mark
        line = f" (line {mark.line + 1})" if mark is not None else ""
        return InputFileError(f"{self.where}{line}: {message}")

    def grow(self, event: yaml.Event, nodes: int) -> None:
        self.expanded += nodes
        if self.expanded > MAX_EXPANDED_NODES:
            raise self.fail(
                event,
                f"expands to more than {MAX_EXPANDED_NODES} YAML nodes (anchors and aliases multiply "
                "them); a topology is small data: write it out without aliases",
            )

    def child_done(self, event: yaml.Event, key_text: str | None) -> None:
        if not self.stack or self.stack[-1].kind != "mapping":
            return
        parent = self.stack[-1]
        if parent.expecting_key and key_text is not None:
            if key_text in parent.keys:
                raise self.fail(event, f"the key {key_text!r} is given twice in one mapping")
            parent.keys.add(key_text)
        parent.expecting_key = not parent.expecting_key

    def feed(self, event: yaml.Event) -> None:
        if isinstance(event, yaml.AliasEvent):
            self.aliases += 1
            if self.aliases > MAX_ALIASES:
                raise self.fail(event, f"uses more than {MAX_ALIASES} YAML aliases (*name)")
            self.grow(event, self.anchors.get(str(event.anchor), 1))
            self.child_done(event, None)
        elif isinstance(event, yaml.ScalarEvent):
            self.grow(event, 1)
            if event.anchor:
                self.anchors[str(event.anchor)] = 1
            self.child_done(event, str(event.value))
        elif isinstance(event, yaml.MappingStartEvent | yaml.SequenceStartEvent):
            self.grow(event, 1)
            kind = "mapping" if isinstance(event, yaml.MappingStartEvent) else "sequence"
            self.stack.append(_Collection(kind, event.anchor, self.expanded))
            if len(self.stack) > MAX_DEPTH:
                raise self.fail(event, f"nests deeper than {MAX_DEPTH} levels")
        elif isinstance(event, yaml.MappingEndEvent | yaml.SequenceEndEvent):
            done = self.stack.pop()
            if done.anchor:
                self.anchors[str(done.anchor)] = self.expanded - done.start + 1
            self.child_done(event, None)


def parse_yaml(text: str, *, where: str) -> Any:
    """Plain data from YAML text (one document), within the alias, size and depth budget."""
    if "\x00" in text:
        raise InputFileError(f"{where} is binary (it contains NUL characters), not YAML text")
    budget = _Budget(where)
    try:
        for event in yaml.parse(text, Loader=SAFE_LOADER):
            budget.feed(event)
        return yaml.load(text, Loader=SAFE_LOADER)  # a safe loader, its events checked above
    except InputFileError:
        raise
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = f" (line {mark.line + 1}, column {mark.column + 1})" if mark is not None else ""
        raise InputFileError(f"{where} is not valid YAML{line}: {exc.problem or exc.context}") from exc
    except yaml.YAMLError as exc:
        raise InputFileError(f"{where} is not valid YAML: {exc}") from exc
    except (ValueError, OverflowError, RecursionError) as exc:
        # e.g. an integer of more digits than Python converts (int_max_str_digits).
        raise InputFileError(f"{where} holds a value that cannot be read: {exc}") from exc


def load_yaml_file(path: str | Path, *, what: str, max_bytes: int = MAX_DATA_BYTES) -> Any:
    return parse_yaml(read_text(path, what=what, max_bytes=max_bytes), where=f"{what} {path}")


def load_json_file(path: str | Path, *, what: str, max_bytes: int = MAX_DATA_BYTES) -> Any:
    text = read_text(path, what=what, max_bytes=max_bytes)
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputFileError(f"{what} {path} is not valid JSON (line {exc.lineno}): {exc.msg}") from exc
    except (ValueError, RecursionError) as exc:
        raise InputFileError(f"{what} {path} holds a value that cannot be read: {exc}") from exc
