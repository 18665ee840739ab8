"""Regenerate sglang_flags.yaml from SGLang's own argparse parser (maintainer tool, not run by tests).

    pip download sglang=="$(python3 tools/sglnode/pins.py get sglang)" --no-deps -d /tmp/sgl
    cd /tmp/sgl && python -m zipfile -e sglang-*.whl x
    python -m venv /tmp/sglvenv && /tmp/sglvenv/bin/pip install msgspec pyyaml packaging
    /tmp/sglvenv/bin/python tools/sglnode/topology/regen_sglang_flags.py /tmp/sgl/x > sglang_flags.yaml

Importing sglang.srt.server_args needs torch, transformers and CUDA; none of that shapes the parser,
so every third-party import except msgspec/yaml/packaging is replaced by an inert stub, then
ServerArgs.add_cli_args() builds the real parser and every option it registered is written out.
The `removed` section is kept by hand (flags older releases had, with the pinned release's replacement).

Env: SGLNODE_TORCH_VERSION (the stub torch's __version__; default the pinned torch of
tools/sglnode/pins.yaml, read when this file is in a checkout; tests in the image pass it).
"""

from __future__ import annotations

import abc
import argparse
import importlib.abc
import importlib.machinery
import json
import os
import re
import sys
import types
from pathlib import Path
from typing import Any

import yaml

REAL_PACKAGES = {"sglang", "msgspec", "yaml", "packaging"}
PINS_FILE = Path(__file__).resolve().parents[1] / "pins.yaml"


def _stub_version() -> str:
    """The pinned torch (the pinned SGLang's): some modules parse torch.__version__."""
    if os.environ.get("SGLNODE_TORCH_VERSION"):
        return os.environ["SGLNODE_TORCH_VERSION"]
    if PINS_FILE.is_file():
        found = re.search(r'^torch:\s*"?([^"\s#]+)', PINS_FILE.read_text(encoding="utf-8"), re.MULTILINE)
        if found:
            return found.group(1)
    raise SystemExit("set SGLNODE_TORCH_VERSION (the pinned torch: tools/sglnode/pins.yaml)")


HEADER = Path(__file__).resolve().parent / "sglang_flags.yaml"
KEEP_SECTIONS = ("sglang_version", "speculative_algorithms", "defaults", "removed")
LINE_MAX = 150  # .yamllint allows 160
UNWRAPPED = 10**6  # never let PyYAML wrap: yamllint rejects its continuation indentation
# Dunder attributes SGLang reads off stubbed classes at import (hf_transformers_patches.py).
STUB_DUNDERS = {"__class_validators__"}


class _Meta(abc.ABCMeta):
    """Stub classes answer any attribute, call, subscript or arithmetic with another stub."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name not in STUB_DUNDERS:
            raise AttributeError(name)
        return _Anything

    def __getitem__(cls, key: Any) -> Any:
        return _Anything

    def __or__(cls, other: Any) -> Any:
        return _Anything

    __ror__ = __or__
    __add__ = __or__
    __mul__ = __or__

    def __iter__(cls) -> Any:
        return iter(())

    def __bool__(cls) -> bool:
        return False

    def __int__(cls) -> int:
        return 0

    __index__ = __int__

    def __float__(cls) -> float:
        return 0.0

    def __len__(cls) -> int:
        return 0

    def __contains__(cls, item: Any) -> bool:
        return False

    def __lt__(cls, other: Any) -> bool:
        return False

    __gt__ = __lt__

    def __le__(cls, other: Any) -> bool:
        return True

    __ge__ = __le__

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return abc.ABCMeta.__call__(cls)


class _Anything(metaclass=_Meta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]
        return _Anything

    def __iter__(self) -> Any:
        return iter(())


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return _Anything


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        top = name.split(".", maxsplit=1)[0]
        if top in REAL_PACKAGES or top in sys.stdlib_module_names:
            return None
        return importlib.machinery.ModuleSpec(name, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__spec__ = spec
        module.__version__ = _stub_version()  # type: ignore[attr-defined]
        module.__all__ = []  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def _deprecation(action: argparse.Action) -> str | None:
    if type(action).__name__.startswith("Deprecated"):
        return str(getattr(action, "new_flag", "") or "deprecated")
    text = (action.help or "").lstrip("(")
    return text.split(")")[0][:100] if text.startswith("Deprecated") else None


def dump_flags(wheel_root: str | None) -> dict[str, Any]:
    """Every option of ServerArgs' parser. `wheel_root` None: the installed SGLang, imported for real."""
    if wheel_root is not None:
        sys.path.insert(0, wheel_root)
        sys.meta_path.append(_StubFinder())
    from sglang.srt.server_args import ServerArgs  # noqa: PLC0415 - importable only after the stubs

    parser = argparse.ArgumentParser()
    ServerArgs.add_cli_args(parser)
    flags: dict[str, Any] = {}
    for action in sorted(parser._actions, key=lambda a: a.option_strings[:1]):
        if not action.option_strings or "-h" in action.option_strings:
            continue
        spec: dict[str, Any] = {"value": action.nargs != 0}
        if len(action.option_strings) > 1:
            spec["aliases"] = action.option_strings[1:]
        if action.choices:
            spec["choices"] = sorted(str(c) for c in action.choices)
        deprecated = _deprecation(action)
        if deprecated:
            spec["deprecated"] = deprecated
        flags[action.option_strings[0]] = spec
    return flags


class _IndentedDumper(yaml.SafeDumper):
    """Block lists indented under their key, as yamllint's default `indentation` rule wants."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def _entries(mapping: dict[str, Any], indent: str = "  ") -> list[str]:
    """One flow-style line per entry where it fits yamllint's line length, block style otherwise."""
    lines: list[str] = []
    for key, value in mapping.items():
        flow = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, width=UNWRAPPED)
        # A lone scalar is dumped as a document: drop its "..." end marker.
        line = f"{indent}{key}: " + flow.strip().removesuffix("...").strip()
        if len(line) <= LINE_MAX:
            lines.append(line)
            continue
        lines.append(f"{indent}{key}:")
        block = yaml.dump(
            value, Dumper=_IndentedDumper, default_flow_style=False, sort_keys=False, width=UNWRAPPED
        )
        lines.extend(f"{indent}  {row}" for row in block.splitlines())
    return lines


def main(argv: list[str]) -> int:
    if len(argv) >= 2 and argv[1] == "--json":
        # `--json ROOT`: a source tree, imports stubbed; `--json --installed`: the real SGLang (image).
        root = None if argv[2:] == ["--installed"] else argv[2]
        json.dump(dump_flags(root), sys.stdout, sort_keys=True)
        return 0
    current = yaml.safe_load(HEADER.read_text(encoding="utf-8"))
    header = HEADER.read_text(encoding="utf-8").split("\nsglang_version:")[0]
    lines = [header]
    lines += _entries({key: current[key] for key in KEEP_SECTIONS[:-1] if key in current}, indent="")
    lines += ["removed:", *_entries(current.get("removed") or {})]
    lines += ["flags:", *_entries(dump_flags(argv[1]))]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
