"""The catalogue of upstream strings this repo depends on: SGLang's log lines and fatal messages.

`sglang-strings.yaml` (next to this file) lists each string the tools read or the simulator prints:
where it is in the pinned wheel (file, line, enclosing function), its format template (see
`strings.extract`) and what in this repo uses it. The entries' `file` / `contains` keys say how to
find the string; everything else is generated from the wheel by `sglnode upstream refresh`, and
`check` (run by the conformance tests) reports every entry whose generated part no longer matches
the wheel: a pin bump with a stale catalogue fails `make test`.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from sglnode.upstream.strings import ExtractError, Field, Template, extract

CATALOG_RESOURCE = "sglang-strings.yaml"
KINDS = ("log", "fatal", "frame")  # frame: a string that only locates a function for tracebacks
SPEC_KEYS = ("id", "kind", "file", "contains", "occurrence", "used_by", "note")
GENERATED_KEYS = ("line", "function", "template", "fields")
HEADER = """\
# yamllint disable rule:line-length
# SGLang's own log lines and fatal messages that this repo reads (readiness, diagnosis) or prints
# (the simulator), extracted from the pinned wheel's source. Each entry: `id`, `kind` (log | fatal,
# or frame: a docstring that locates a function the simulator's tracebacks pass through),
# `file` and `contains` (+ `occurrence` when several strings in the file contain it) to find it,
# `used_by` (what in this repo depends on it), and the generated `line`, `function`, `template`
# (a str.format template: fields are named after upstream's expressions, listed in `fields`).
# Regenerate with `sglnode upstream refresh` after a pin bump and review the diff; the conformance
# tests fail while this file differs from the pinned wheel (tools/tests/test_upstream_strings.py).
# Templates stay on one line each (greppable), hence no line-length limit here.
"""


class CatalogError(ValueError):
    """The catalogue file is malformed."""


@dataclass(frozen=True)
class Entry:
    id: str
    kind: str
    file: str
    contains: str
    occurrence: int | None  # which match, where `contains` is in several strings of the file
    used_by: tuple[str, ...]
    note: str
    template: Template

    @property
    def text(self) -> str:
        return self.template.template

    def render(self, **values: Any) -> str:
        return self.template.render(**values)

    def pattern(self) -> re.Pattern[str]:
        """A regex any rendering of this template matches (fields as lazy wildcards)."""
        parts = []
        for literal, name, _, _ in string.Formatter().parse(self.text):
            parts.append(re.escape(literal))
            if name is not None:
                parts.append(".*?")
        return re.compile("".join(parts), re.DOTALL)

    def spec(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "kind": self.kind, "file": self.file, "contains": self.contains}
        if self.occurrence is not None:
            out["occurrence"] = self.occurrence
        out["used_by"] = list(self.used_by)
        if self.note:
            out["note"] = self.note
        return out


@dataclass(frozen=True)
class Drift:
    """One entry whose copy here differs from the wheel (or cannot be found there any more)."""

    id: str
    reason: str
    ours: str | None
    upstream: str | None
    used_by: tuple[str, ...]

    def describe(self) -> str:
        lines = [f"{self.id}: {self.reason} (used by: {', '.join(self.used_by) or '-'})"]
        if self.ours is not None:
            lines.append(f"  ours:     {self.ours}")
        if self.upstream is not None:
            lines.append(f"  upstream: {self.upstream}")
        return "\n".join(lines)


def _entry(raw: dict[str, Any]) -> Entry:
    unknown = set(raw) - set(SPEC_KEYS) - set(GENERATED_KEYS)
    if unknown:
        raise CatalogError(f"{raw.get('id', '?')}: unknown keys {sorted(unknown)}")
    for key in ("id", "kind", "file", "contains"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise CatalogError(f"{raw.get('id', '?')}: `{key}` must be a non-empty string")
    if raw["kind"] not in KINDS:
        raise CatalogError(f"{raw['id']}: kind must be one of {KINDS}")
    fields = tuple(Field(str(name), str(expr)) for name, expr in (raw.get("fields") or {}).items())
    template = Template(
        file=raw["file"],
        line=int(raw.get("line") or 0),
        function=str(raw.get("function") or ""),
        template=str(raw.get("template") or ""),
        fields=fields,
    )
    return Entry(
        id=raw["id"],
        kind=raw["kind"],
        file=raw["file"],
        contains=raw["contains"],
        occurrence=None if raw.get("occurrence") is None else int(raw["occurrence"]),
        used_by=tuple(str(u) for u in raw.get("used_by") or ()),
        note=str(raw.get("note") or ""),
        template=template,
    )


def parse(text: str) -> tuple[str, list[Entry]]:
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    if not isinstance(data, dict) or not isinstance(data.get("strings"), list):
        raise CatalogError("the catalogue needs `sglang_version` and a `strings` list")
    entries = [_entry(raw) for raw in data["strings"]]
    ids = [entry.id for entry in entries]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise CatalogError(f"duplicate ids: {duplicates}")
    return str(data.get("sglang_version", "")), entries


@cache
def _checked_in() -> tuple[str, dict[str, Entry]]:
    version, entries = parse(
        resources.files("sglnode.upstream").joinpath(CATALOG_RESOURCE).read_text("utf-8")
    )
    return version, {entry.id: entry for entry in entries}


def load() -> dict[str, Entry]:
    """The checked-in catalogue, by id."""
    return _checked_in()[1]


def load_version() -> str:
    """The SGLang release the catalogue was extracted from (the pin)."""
    return _checked_in()[0]


def get(entry_id: str) -> Entry:
    try:
        return load()[entry_id]
    except KeyError as exc:
        raise KeyError(f"{entry_id!r} is not in {CATALOG_RESOURCE}") from exc


SAMPLE_NUMBER = 42
SAMPLE_FLOAT = 1.25


def sample(entry: Entry, **values: Any) -> str:
    """The entry rendered with stand-in values (numbers where the template formats numbers), any
    given values taking precedence: a line upstream could print, for testing what reads it."""
    filled: dict[str, Any] = {}
    for _, name, spec, _ in string.Formatter().parse(entry.text):
        if not name or name in filled:
            continue
        kind = (spec or "")[-1:]
        filled[name] = SAMPLE_FLOAT if kind in ("f", "e", "g", "%") else SAMPLE_NUMBER
    filled.update(values)
    return entry.render(**filled)


def regenerate(entry: Entry, read: Any) -> Template:
    """The entry's template as the given source tree has it (`read(member) -> text`)."""
    return extract(read(entry.file), entry.file, entry.contains, entry.occurrence or 0)


def check(entries: list[Entry], read: Any) -> list[Drift]:
    """Every entry whose generated part differs from what `read`'s source says."""
    drifts: list[Drift] = []
    for entry in entries:
        try:
            fresh = regenerate(entry, read)
        except FileNotFoundError:
            drifts.append(Drift(entry.id, f"{entry.file} is gone", entry.text, None, entry.used_by))
            continue
        except ExtractError as exc:
            drifts.append(Drift(entry.id, str(exc), entry.text, None, entry.used_by))
            continue
        if fresh.template != entry.text or fresh.fields != entry.template.fields:
            drifts.append(Drift(entry.id, "template changed", entry.text, fresh.template, entry.used_by))
        elif (fresh.line, fresh.function) != (entry.template.line, entry.template.function):
            where = f"moved: line {entry.template.line} -> {fresh.line}, {fresh.function}"
            drifts.append(Drift(entry.id, where, None, None, entry.used_by))
    return drifts


def dump(version: str, entries: list[Entry], read: Any) -> str:
    """The catalogue regenerated from `read`'s source, spec keys kept as they are."""
    rows = []
    for entry in entries:
        fresh = regenerate(entry, read)
        row = entry.spec()
        row.update(
            line=fresh.line,
            function=fresh.function,
            template=fresh.template,
            fields={f.name: f.expression for f in fresh.fields},
        )
        rows.append(row)
    body = yaml.dump(
        {"sglang_version": version, "strings": rows},
        Dumper=_IndentedDumper,
        sort_keys=False,
        width=10**6,
        allow_unicode=True,
    )
    return HEADER + body


class _IndentedDumper(yaml.SafeDumper):
    """Block lists indented under their key, as the repo's yamllint `indentation` rule wants."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def catalog_path() -> Path:
    return Path(__file__).resolve().parent / CATALOG_RESOURCE
