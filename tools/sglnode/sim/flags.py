"""SGLang's launch-flag parser, rebuilt from the flag list the topology validator owns.

The accepted flags are data (topology/sglang_flags.yaml, dumped from the pinned sglang's own
argparse parser), so the simulator accepts exactly what the rendered compose/units pass and
rejects the rest the way SGLang's argparse does (exit 2, "unrecognized arguments").
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sglnode.topology.safeyaml import load_yaml_file

FLAGS_FILE = Path(__file__).resolve().parents[1] / "topology" / "sglang_flags.yaml"
# What `python3 -m sglang.launch_server` shows as its program name in usage/errors.
SGLANG_PROG = "launch_server.py"
# Leading launcher words the rendered commands may carry; everything after them is SGLang's.
LAUNCHER_MODULES = ("sglang.launch_server",)
PYTHON_NAMES = ("python", "python3")


def strip_launcher(argv: list[str]) -> list[str]:
    """Drop an optional `python3 -m sglang.launch_server` (or `sglang serve`) prefix."""
    args = list(argv)
    if args and Path(args[0]).name.startswith(PYTHON_NAMES):
        args = args[1:]
    if args[:1] == ["-m"] and len(args) >= 2 and args[1] in LAUNCHER_MODULES:
        return args[2:]
    if args[:2] == ["sglang", "serve"]:
        return args[2:]
    return args


def load_flag_table(path: Path = FLAGS_FILE) -> dict[str, Any]:
    data = load_yaml_file(path, what="flag catalogue")
    if not isinstance(data, dict) or "flags" not in data:
        raise ValueError(f"{path}: expected a mapping with a 'flags' table")
    return data


def build_sglang_parser(table: dict[str, Any] | None = None, epilog: str = "") -> argparse.ArgumentParser:
    """An argparse parser that accepts the pinned SGLang's flags (values kept as strings)."""
    table = table or load_flag_table()
    parser = argparse.ArgumentParser(
        prog=SGLANG_PROG,
        description=(
            "sglnode sim: a SIMULATED SGLang server (test double; no GPU, no model). "
            f"Accepts the launch flags of SGLang {table.get('sglang_version', '?')}."
        ),
        epilog=epilog,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        # SGLang's parser keeps argparse's default abbreviation matching (`--tp` -> `--tp-size`).
        allow_abbrev=True,
    )
    for name, raw_spec in sorted(table["flags"].items()):
        spec = raw_spec or {}
        spellings = [name, *(spec.get("aliases") or [])]
        kwargs: dict[str, Any] = {"dest": name.lstrip("-").replace("-", "_")}
        if spec.get("value", True):
            if spec.get("nargs") is not None:
                kwargs["nargs"] = spec["nargs"]
            if spec.get("choices"):
                kwargs["choices"] = [str(c) for c in spec["choices"]]
        else:
            kwargs["action"] = "store_true"
        if name == "--model-path":
            kwargs["required"] = True
        parser.add_argument(*spellings, **kwargs)
    return parser
