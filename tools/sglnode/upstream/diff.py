"""What changed between two SGLang releases, and what in this repo depends on each change.

A pin bump is then a reviewed diff: launch flags added and removed (from each release's own
argparse, run with its heavy imports stubbed), the catalogued log lines and fatal messages, the
memory-budget functions the planner ports, and the error messages raised on the startup path.
"""

from __future__ import annotations

import ast
import contextlib
import difflib
import json
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path
from typing import Any

from sglnode.upstream import catalog
from sglnode.upstream.strings import ExtractError
from sglnode.upstream.wheels import WheelSource

FLAGS_SCRIPT = Path(__file__).resolve().parents[1] / "topology" / "regen_sglang_flags.py"
FLAGS_TIMEOUT_S = 300
# Functions whose arithmetic sglnode.planning ports; a change in any of them needs a new port.
MEMORY_FUNCTIONS: tuple[tuple[str, str], ...] = (
    ("sglang/srt/arg_groups/memory_hook.py", "handle_gpu_memory_settings"),
    ("sglang/srt/arg_groups/memory_hook.py", "reserve_for_graph_mb"),
    ("sglang/srt/arg_groups/memory_hook.py", "reserve_for_deepep_a2a_mb"),
    ("sglang/srt/arg_groups/cuda_graph_hook.py", "generate_decode_cuda_graph_batch_sizes"),
    ("sglang/srt/arg_groups/cuda_graph_hook.py", "generate_prefill_cuda_graph_batch_sizes"),
    ("sglang/srt/mem_cache/kv_cache_configurator.py", "KVCacheConfigurator._profile_available_bytes"),
    ("sglang/srt/mem_cache/kv_cache_configurator.py", "KVCacheConfigurator.resolve_max_num_reqs"),
    ("sglang/srt/model_executor/pool_configurator.py", "DefaultPoolConfigurator._compute_cell_size"),
    ("sglang/srt/model_executor/pool_configurator.py", "DSV4PoolConfigurator.calculate_pool_sizes"),
)
# Files whose raised messages an operator meets between `launch_server` and the first request.
STARTUP_PATH_FILES: tuple[str, ...] = (
    "sglang/srt/mem_cache/kv_cache_configurator.py",
    "sglang/srt/model_executor/pool_configurator.py",
    "sglang/srt/model_executor/model_runner.py",
    "sglang/srt/model_executor/runner/decode_cuda_graph_runner.py",
    "sglang/srt/entrypoints/engine.py",
    "sglang/srt/utils/network.py",
    "sglang/srt/disaggregation/common/conn.py",
    "sglang/srt/disaggregation/nixl/conn.py",
    "sglang/srt/disaggregation/mooncake/conn.py",
    "sglang/srt/arg_groups/attention_hook.py",
    "sglang/srt/arg_groups/memory_hook.py",
)


def _read_or_none(source: WheelSource, member: str) -> str | None:
    try:
        return source.read(member)
    except FileNotFoundError:
        return None


def function_source(text: str, qualified: str) -> str | None:
    """The source of `Class.method` or `function` in a module's text (None if absent)."""
    tree = ast.parse(text)
    parts = qualified.split(".")
    scope: list[ast.stmt] = list(tree.body)
    node: ast.AST | None = None
    for part in parts:
        node = next(
            (
                n
                for n in scope
                if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) and n.name == part
            ),
            None,
        )
        if node is None:
            return None
        scope = list(getattr(node, "body", []))
    return ast.get_source_segment(text, node) if node is not None else None


def raised_messages(text: str) -> set[str]:
    """The literal text of every exception raised with a string (f-string holes shown as {})."""
    messages: set[str] = set()
    for node in ast.walk(ast.parse(text)):
        if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
            continue
        first = node.exc.args[0]
        if isinstance(first, ast.Constant) and isinstance(first.value, str):
            messages.add(first.value)
        elif isinstance(first, ast.JoinedStr):
            messages.add(
                "".join(str(v.value) if isinstance(v, ast.Constant) else "{}" for v in first.values)  # type: ignore[attr-defined]
            )
    return messages


def flags_of(source: WheelSource) -> dict[str, Any] | None:
    """The release's launch flags, from its own argparse (run in a subprocess, heavy imports stubbed)."""
    if source._zip is None:  # an unpacked tree
        root = source.path
        return _run_flags(root)
    with tempfile.TemporaryDirectory(prefix="sglnode-flags-") as tmp, zipfile.ZipFile(source.path) as wheel:
        wheel.extractall(tmp, members=[m for m in wheel.namelist() if m.endswith(".py")])
        return _run_flags(Path(tmp))


def _run_flags(root: Path) -> dict[str, Any] | None:
    result = subprocess.run(
        [sys.executable, str(FLAGS_SCRIPT), "--json", str(root)],
        capture_output=True,
        text=True,
        timeout=FLAGS_TIMEOUT_S,
        check=False,
    )
    if result.returncode != 0:
        return None
    return json.loads(result.stdout)


def _version(source: WheelSource) -> str:
    """The release's version from its dist-info METADATA (the wheel's own record of it)."""
    for member in source.names():
        if member.endswith(".dist-info/METADATA"):
            for line in (_read_or_none(source, member) or "").splitlines():
                if line.startswith("Version:"):
                    return line.split(":", 1)[1].strip()
    return source.path.name


def diff_releases(old: WheelSource, new: WheelSource) -> dict[str, Any]:
    report: dict[str, Any] = {"old": _version(old), "new": _version(new)}

    old_flags, new_flags = flags_of(old), flags_of(new)
    if old_flags is None or new_flags is None:
        report["flags"] = {"error": "could not run one release's argparse (see regen_sglang_flags.py)"}
    else:
        report["flags"] = {
            "added": sorted(set(new_flags) - set(old_flags)),
            "removed": sorted(set(old_flags) - set(new_flags)),
            "changed": sorted(f for f in set(old_flags) & set(new_flags) if old_flags[f] != new_flags[f]),
            "used_by": "topology/sglang_flags.yaml (validator, simulator); regenerate it in the new image",
        }

    strings = []
    for entry in catalog.load().values():
        before = after = None
        with contextlib.suppress(ExtractError, FileNotFoundError):
            before = catalog.regenerate(entry, old.read).template
        with contextlib.suppress(ExtractError, FileNotFoundError):
            after = catalog.regenerate(entry, new.read).template
        if before != after:
            strings.append({"id": entry.id, "old": before, "new": after, "used_by": list(entry.used_by)})
    report["strings"] = strings

    memory = []
    for file, function in MEMORY_FUNCTIONS:
        before = function_source(_read_or_none(old, file) or "", function)
        after = function_source(_read_or_none(new, file) or "", function)
        if before != after:
            patch = difflib.unified_diff(
                (before or "").splitlines(),
                (after or "").splitlines(),
                f"old/{file}",
                f"new/{file}",
                lineterm="",
            )
            memory.append(
                {"function": f"{file}:{function}", "diff": "\n".join(patch), "used_by": ["planning (port)"]}
            )
    report["memory_functions"] = memory

    fatal = []
    for file in STARTUP_PATH_FILES:
        before_set = raised_messages(_read_or_none(old, file) or "")
        after_set = raised_messages(_read_or_none(new, file) or "")
        if before_set != after_set:
            fatal.append(
                {
                    "file": file,
                    "added": sorted(after_set - before_set),
                    "removed": sorted(before_set - after_set),
                }
            )
    report["raised_messages"] = fatal
    return report


def format_diff(report: dict[str, Any]) -> str:
    lines = [f"SGLang {report['old']} -> {report['new']}"]
    flags = report["flags"]
    if "error" in flags:
        lines.append(f"flags: {flags['error']}")
    else:
        counts = f"+{len(flags['added'])} -{len(flags['removed'])} ~{len(flags['changed'])}"
        lines.append(f"flags: {counts} ({flags['used_by']})")
        lines += [f"  + {f}" for f in flags["added"]]
        lines += [f"  - {f}" for f in flags["removed"]]
        lines += [f"  ~ {f}" for f in flags["changed"]]
    lines.append(f"catalogued strings changed: {len(report['strings'])}")
    for item in report["strings"]:
        lines.append(f"  {item['id']} (used by {', '.join(item['used_by'])})")
        lines.append(f"    old: {item['old']}")
        lines.append(f"    new: {item['new']}")
    lines.append(f"memory-budget functions changed: {len(report['memory_functions'])}")
    for item in report["memory_functions"]:
        lines.append(f"  {item['function']} (used by {', '.join(item['used_by'])})")
        lines += [f"    {row}" for row in item["diff"].splitlines()]
    lines.append(f"startup-path files whose raised messages changed: {len(report['raised_messages'])}")
    for item in report["raised_messages"]:
        lines.append(f"  {item['file']}")
        lines += [f"    + {m}" for m in item["added"]]
        lines += [f"    - {m}" for m in item["removed"]]
    return "\n".join(lines)
