"""Every pinned version and the node's hardware facts, read from pins.yaml (the one place they live).

    from sglnode.pins import PINS          # typed, validated, loaded once
    PINS.sglang, PINS.gpu.sm, PINS.sglang_image, PINS.ports.sglang

Also a script with no dependency beyond the standard library (PyYAML is used when present), for the
build scripts and the Ansible lookup plugin, which load this file by path:

    python3 tools/sglnode/pins.py get KEY      one value (dotted: gpu.sm, ports.router, sglang_image)
    python3 tools/sglnode/pins.py json         every value, derived ones included
    python3 tools/sglnode/pins.py sync         rewrite the generated pin lines and the README table
    python3 tools/sglnode/pins.py sync --check exit 1 when one of them is stale
    python3 tools/sglnode/pins.py regenerate   what else a bump needs (network, image or GPU)

The GPU's facts (device name, compute capability, memory) come from the hardware preset that
`gpu.preset` names (planning/hardware/<preset>.yaml), so they too have one place.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, fields
from functools import cache
from pathlib import Path
from typing import Any

PINS_FILE = Path(__file__).resolve().with_name("pins.yaml")
HARDWARE_DIR = Path(__file__).resolve().parent / "planning" / "hardware"
# The repository root when this file is in a checkout (tools/sglnode/pins.py).
REPO_ROOT = Path(__file__).resolve().parents[2]
SYNC_COMMAND = "python3 tools/sglnode/pins.py sync"
VERSION = re.compile(r"^[0-9][0-9A-Za-z.+-]*$")
COMPUTE_CAPABILITY = re.compile(r"^[0-9]+\.[0-9]+$")
# Dotted keys: value, as `get` prints them; also what the Ansible lookup accepts.
EXIT_USAGE = 64


class PinsError(ValueError):
    """pins.yaml (or the preset it names) is missing, malformed or inconsistent."""


# --- A reader for the small YAML subset pins.yaml and the hardware presets use ---------------------
# Mappings nested by indentation, scalars (plain, single- or double-quoted), comments. Used when PyYAML
# is not installed (a bare python3 running a build script); tools/tests/test_pins.py checks that both
# readers agree on both files.
_KEY_LINE = re.compile(r"^(?P<indent> *)(?P<key>[A-Za-z_][A-Za-z0-9_-]*):(?:\s+(?P<value>.*))?$")


def _strip_comment(text: str) -> str:
    quote = None
    for index, char in enumerate(text):
        if quote:
            if char == quote:
                quote = None
        elif char in "'\"":
            quote = char
        elif char == "#" and (index == 0 or text[index - 1] in " \t"):
            return text[:index].rstrip()
    return text.rstrip()


def _scalar(text: str) -> Any:
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        return text[1:-1]
    if text in {"true", "false"}:
        return text == "true"
    if re.fullmatch(r"-?[0-9]+", text):
        return int(text)
    if re.fullmatch(r"-?[0-9]+\.[0-9]+", text):
        return float(text)
    return text


def parse_simple_yaml(text: str, origin: str = "<yaml>") -> dict[str, Any]:
    root: dict[str, Any] = {}
    stack: list[tuple[int, dict[str, Any]]] = [(-1, root)]
    for number, raw in enumerate(text.splitlines(), 1):
        line = _strip_comment(raw)
        if not line.strip() or line.strip() == "---":
            continue
        match = _KEY_LINE.match(line)
        if not match:
            raise PinsError(f"{origin}:{number}: not 'key: value' ({raw.strip()!r})")
        indent = len(match["indent"])
        while indent <= stack[-1][0]:
            stack.pop()
        parent = stack[-1][1]
        if match["value"] is None:
            child: dict[str, Any] = {}
            parent[match["key"]] = child
            stack.append((indent, child))
        else:
            parent[match["key"]] = _scalar(match["value"].strip())
    return root


def read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise PinsError(f"cannot read {path}: {exc.strerror}") from exc
    try:
        import yaml  # noqa: PLC0415 - optional: the build scripts may run a bare python3

        data = yaml.safe_load(text)
    except ImportError:
        data = parse_simple_yaml(text, str(path))
    if not isinstance(data, dict):
        raise PinsError(f"{path} is not a mapping")
    return data


# --- The typed pins --------------------------------------------------------------------------------
@dataclass(frozen=True)
class Images:
    sglang: str
    router: str
    sim: str


@dataclass(frozen=True)
class Ports:
    sglang: int
    bootstrap: int
    router: int
    router_prometheus: int


@dataclass(frozen=True)
class Gpu:
    preset: str
    count: int
    model: str
    # From the hardware preset.
    device_name: str
    compute_capability: str
    memory_mib: int

    @property
    def sm_number(self) -> str:
        """The SM number: "XY" for compute capability X.Y."""
        return self.compute_capability.replace(".", "")

    @property
    def sm(self) -> str:
        """sm_XY: the architecture name cuobjdump and nvcc print."""
        return f"sm_{self.sm_number}"

    @property
    def sm_arch_specific(self) -> str:
        """sm_XYa: the arch-specific target (block-scaled MMA and the like)."""
        return f"{self.sm}a"

    @property
    def cuda_arch(self) -> str:
        """X.Ya: TORCH_CUDA_ARCH_LIST / FLASHINFER_CUDA_ARCH_LIST for the arch-specific target."""
        return f"{self.compute_capability}a"


@dataclass(frozen=True)
class Pins:
    sglnode: str
    sglang: str
    torch: str
    flashinfer: str
    sglang_kernel: str
    cuda: str
    cuda_wheels: str
    cuobjdump: str
    nixl: str
    mooncake: str
    sglang_router: str
    driver_branch: int
    nccl: str
    cudnn: str
    flash_attn: str
    deepep: str
    base_image: str
    images: Images
    ports: Ports
    gpu: Gpu

    @property
    def cuda_tag(self) -> str:
        """cu<major><minor>: the CUDA part of wheel and image tags."""
        return "cu" + "".join(self.cuda.split(".")[:2])

    @property
    def sglang_image_versions(self) -> str:
        """<sglang>-cu<MM>-torch<torch>: what images/sglang/image_tag.py puts before the digest."""
        return f"{self.sglang}-{self.cuda_tag}-torch{self.torch}"

    @property
    def sglang_image(self) -> str:
        """The SGLang image reference without its digest part (when no build said which)."""
        return f"{self.images.sglang}:{self.sglang_image_versions}"

    @property
    def router_image(self) -> str:
        return f"{self.images.router}:{self.sglang_router}"

    @property
    def sim_image(self) -> str:
        return f"{self.images.sim}:{self.sglnode}"

    def to_dict(self) -> dict[str, Any]:
        """Every value, the derived ones included (the Ansible lookup's and `json`'s view)."""
        data = asdict(self)
        for name in ("cuda_tag", "sglang_image_versions", "sglang_image", "router_image", "sim_image"):
            data[name] = getattr(self, name)
        for name in ("sm_number", "sm", "sm_arch_specific", "cuda_arch"):
            data["gpu"][name] = getattr(self.gpu, name)
        return data

    def get(self, key: str) -> Any:
        value: Any = self.to_dict()
        for part in key.split("."):
            if not isinstance(value, dict) or part not in value:
                raise PinsError(f"no pin {key!r}; known: {', '.join(sorted(flatten(self.to_dict())))}")
            value = value[part]
        return value


def gpu_env(values: Pins | None = None) -> dict[str, str]:
    """The node's GPU facts for code that runs inside the SGLang image without this package
    (tools/oracle/node_double.py): `docker run -e` these."""
    gpu = (values or pins()).gpu
    return {
        "SGLNODE_GPU_NAME": gpu.device_name,
        "SGLNODE_GPU_CAPABILITY": gpu.compute_capability,
        "SGLNODE_GPU_MIB": str(gpu.memory_mib),
        "SGLNODE_GPU_COUNT": str(gpu.count),
    }


def flatten(data: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def _section(cls: type, data: Any, where: str) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise PinsError(f"{where} must be a mapping")
    names = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - names)
    if unknown:
        raise PinsError(f"{where}: unknown key(s) {', '.join(unknown)}")
    return data


def _typed(value: Any, want: type, where: str) -> Any:
    if want is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise PinsError(f"{where} must be an integer, got {value!r}")
        return value
    if not isinstance(value, str) or not value.strip():
        raise PinsError(f"{where} must be a non-empty string (quote versions), got {value!r}")
    return value


def load(path: Path | None = None, hardware_dir: Path | None = None) -> Pins:
    path = path or PINS_FILE
    hardware_dir = hardware_dir or HARDWARE_DIR
    data = _section(Pins, read_yaml(path), str(path))
    required = {f.name for f in fields(Pins)}
    missing = sorted(required - set(data))
    if missing:
        raise PinsError(f"{path}: missing {', '.join(missing)}")
    gpu_data = dict(_section(Gpu, data["gpu"], f"{path}: gpu"))
    preset_name = _typed(gpu_data.get("preset"), str, f"{path}: gpu.preset")
    if not re.fullmatch(r"[a-z0-9][a-z0-9._-]*", preset_name):
        raise PinsError(f"{path}: gpu.preset {preset_name!r} is not a preset name")
    preset = read_yaml(hardware_dir / f"{preset_name}.yaml")
    for key in ("device_name", "compute_capability", "memory_mib"):
        if key in gpu_data:
            raise PinsError(f"{path}: gpu.{key} is the preset's ({preset_name}.yaml), not a pin")
        gpu_data[key] = preset.get(key)
    gpu_values = {}
    for field in fields(Gpu):
        want = int if field.name in {"count", "memory_mib"} else str
        gpu_values[field.name] = _typed(gpu_data.get(field.name), want, f"gpu.{field.name}")
    if not COMPUTE_CAPABILITY.match(gpu_values["compute_capability"]):
        raise PinsError(f"gpu.compute_capability {gpu_values['compute_capability']!r} is not major.minor")
    images = _section(Images, data["images"], "images")
    ports = _section(Ports, data["ports"], "ports")
    sections = {
        "images": Images(
            **{f.name: _typed(images.get(f.name), str, f"images.{f.name}") for f in fields(Images)}
        ),
        "ports": Ports(**{f.name: _typed(ports.get(f.name), int, f"ports.{f.name}") for f in fields(Ports)}),
        "gpu": Gpu(**gpu_values),
    }
    scalars: dict[str, Any] = {}
    for field in fields(Pins):
        if field.name in sections:
            continue
        want = int if field.name == "driver_branch" else str
        scalars[field.name] = _typed(data[field.name], want, field.name)
        if want is str and field.name not in {"base_image", "deepep"} and not VERSION.match(data[field.name]):
            raise PinsError(f"{field.name}: {data[field.name]!r} is not a version")
    if not COMPUTE_CAPABILITY.match(scalars["cuda"]):
        raise PinsError(f"cuda {scalars['cuda']!r} must be the toolkit's major.minor")
    if not scalars["cuda_wheels"].startswith(scalars["cuda"] + "."):
        raise PinsError(f"cuda_wheels {scalars['cuda_wheels']!r} is not a release of CUDA {scalars['cuda']}")
    return Pins(**scalars, **sections)


@cache
def pins() -> Pins:
    """The repository's pins, loaded once."""
    return load()


def __getattr__(name: str) -> Any:
    # `from sglnode.pins import PINS`: loaded on first use, so `pins.py sync` can report a broken file.
    if name == "PINS":
        return pins()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# --- Generated artefacts ---------------------------------------------------------------------------
# Requirement lines rewritten by `sync`: (file, requirement as written before "==", pins key). Comments
# and the order of the files stay as written; only the versions after "==" are generated.
REQUIREMENT_LINES: tuple[tuple[str, str, str], ...] = (
    ("images/sglang/requirements.in", "sglang", "sglang"),
    ("images/sglang/requirements.in", "torch", "torch"),
    ("images/sglang/requirements.in", "flashinfer-python[cu13]", "flashinfer"),
    ("images/sglang/requirements.in", "sglang-kernel", "sglang_kernel"),
    ("images/sglang/requirements.in", "cuda-toolkit[cudart,nvcc,crt,nvvm,cccl]", "cuda_wheels"),
    ("images/sglang/requirements.in", "nvidia-cuda-cuobjdump", "cuobjdump"),
    ("images/sglang/requirements.in", "nixl-cu13", "nixl"),
    ("images/sglang/requirements.in", "nixl", "nixl"),
    ("images/sglang/requirements.in", "mooncake-transfer-engine-cuda13", "mooncake"),
    ("requirements/toolchain.txt", "nvidia-cuda-cuobjdump", "cuobjdump"),
    ("requirements/toolchain.txt", "sglang-router", "sglang_router"),
    # The molecule scenario's stand-in lock: the pins image_tag.py reads for the tag's version part.
    ("molecule/sglang_image/files/image/requirements.lock", "cuda-toolkit", "cuda_wheels"),
    ("molecule/sglang_image/files/image/requirements.lock", "sglang", "sglang"),
    ("molecule/sglang_image/files/image/requirements.lock", "torch", "torch"),
)
README = "README.md"
TABLE_BEGIN = f"<!-- pins:begin (generated from tools/sglnode/pins.yaml by `{SYNC_COMMAND}`) -->"
TABLE_END = "<!-- pins:end -->"
# Rows of the README table: (what, pins key).
TABLE_ROWS: tuple[tuple[str, str], ...] = (
    ("SGLang", "sglang"),
    ("torch", "torch"),
    ("flashinfer-python", "flashinfer"),
    ("sglang-kernel", "sglang_kernel"),
    ("CUDA toolkit (node; image tag part)", "cuda"),
    ("CUDA wheels in the image (cuda-toolkit)", "cuda_wheels"),
    ("cuobjdump (image and host tests)", "cuobjdump"),
    ("NIXL (nixl, nixl-cu13)", "nixl"),
    ("Mooncake transfer engine", "mooncake"),
    ("sglang-router", "sglang_router"),
    ("NVIDIA driver branch", "driver_branch"),
    ("NCCL (node)", "nccl"),
    ("cuDNN (node)", "cudnn"),
    ("flash-attn 2 (built on the node)", "flash_attn"),
    ("DeepEP ref (image, when rebuilt)", "deepep"),
    ("Image base on the node", "base_image"),
    ("SGLang image (before its digest)", "sglang_image"),
    ("Router image", "router_image"),
    ("Simulator image (test double)", "sim_image"),
    ("sglnode", "sglnode"),
    ("SGLang port / PD bootstrap port", "ports.sglang,ports.bootstrap"),
    ("Router port / Prometheus port", "ports.router,ports.router_prometheus"),
    ("GPU preset (tools/sglnode/planning/hardware/)", "gpu.preset"),
    ("GPUs per node", "gpu.count"),
    ("GPU device name", "gpu.device_name"),
    ("Compute capability / arch / arch target", "gpu.compute_capability,gpu.sm,gpu.sm_arch_specific"),
    ("GPU memory (nvidia-smi, MiB)", "gpu.memory_mib"),
)
# What a bump needs beyond `sync`, and the command that makes each (none of them run offline).
REGENERATE: tuple[tuple[str, str], ...] = (
    ("images/sglang/requirements.lock", "tools/setup/lock-image.sh (PyPI)"),
    ("images/router/requirements.txt", "pip freeze in a router image of the new sglang-router (PyPI)"),
    ("tools/sglnode/topology/sglang_flags.yaml", "tools/sglnode/topology/regen_sglang_flags.py (the wheel)"),
    ("tools/sglnode/upstream/wheels.yaml, sglang-strings.yaml", "sglnode upstream fetch / catalog (PyPI)"),
    ("tools/sglnode/topology/kernel-audit.json", "make image (the image's kernel audit, copied out)"),
    ("tools/tests/fixtures/oracle/sglang-<version>-memory.jsonl", "tools/oracle/ in the image"),
    ("the SGLang image itself", "make image; on the node the sglang_image role"),
)


def requirement_lines(repo: Path, values: Pins) -> dict[str, str]:
    """Each file of REQUIREMENT_LINES with its pinned lines set from the pins."""
    out: dict[str, str] = {}
    for relative in dict.fromkeys(path for path, _, _ in REQUIREMENT_LINES):
        text = out.get(relative) or (repo / relative).read_text(encoding="utf-8")
        for path, requirement, key in REQUIREMENT_LINES:
            if path != relative:
                continue
            pattern = re.compile(rf"^{re.escape(requirement)}==\S+$", re.MULTILINE)
            if len(pattern.findall(text)) != 1:
                raise PinsError(f"{relative}: expected one '{requirement}==...' line to pin")
            text = pattern.sub(f"{requirement}=={values.get(key)}", text)
        out[relative] = text
    return out


def _cell(values: Pins, keys: str) -> str:
    return " / ".join(f"`{values.get(key)}`" for key in keys.split(","))


def readme_table(values: Pins) -> str:
    rows = ["| Pin | Value | Key in `tools/sglnode/pins.yaml` |", "| --- | --- | --- |"]
    rows += [
        f"| {what} | {_cell(values, keys)} | {', '.join(f'`{k}`' for k in keys.split(','))} |"
        for what, keys in TABLE_ROWS
    ]
    return "\n".join(rows)


def readme_text(repo: Path, values: Pins) -> str:
    text = (repo / README).read_text(encoding="utf-8")
    begin, end = text.find(TABLE_BEGIN), text.find(TABLE_END)
    if begin < 0 or end < begin:
        raise PinsError(f"{README}: no '{TABLE_BEGIN}' ... '{TABLE_END}' markers")
    return text[: begin + len(TABLE_BEGIN)] + "\n" + readme_table(values) + "\n" + text[end:]


def generated(repo: Path, values: Pins) -> dict[str, str]:
    """Every file `sync` writes, with the content it should have."""
    return {**requirement_lines(repo, values), README: readme_text(repo, values)}


def sync(repo: Path, values: Pins, check: bool) -> list[str]:
    """Write the generated files (or with check, only compare); returns those that were stale."""
    stale = []
    for relative, content in generated(repo, values).items():
        path = repo / relative
        if path.read_text(encoding="utf-8") != content:
            stale.append(relative)
            if not check:
                path.write_text(content, encoding="utf-8")
    return stale


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="pins.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--file", type=Path, default=None, help="pins file (default: the one beside this)")
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("get", help="print one value")
    get.add_argument("key")
    sub.add_parser("json", help="print every value as JSON")
    do_sync = sub.add_parser("sync", help="rewrite the generated pin lines and the README table")
    do_sync.add_argument("--check", action="store_true", help="only report stale files (exit 1)")
    do_sync.add_argument("--repo", type=Path, default=REPO_ROOT)
    sub.add_parser("regenerate", help="list the artefacts a bump needs that sync cannot make")
    try:
        options = parser.parse_args(argv)
    except SystemExit as error:
        return EXIT_USAGE if error.code else 0
    try:
        values = load(options.file) if options.file else pins()
        if options.command == "get":
            print(values.get(options.key))
        elif options.command == "json":
            print(json.dumps(values.to_dict(), indent=2, sort_keys=True))
        elif options.command == "sync":
            stale = sync(options.repo, values, options.check)
            verb = "stale" if options.check else "rewrote"
            for relative in stale:
                print(f"pins: {verb} {relative}", file=sys.stderr if options.check else sys.stdout)
            if options.check and stale:
                print(f"pins: run {SYNC_COMMAND}", file=sys.stderr)
                return 1
        else:
            for artefact, command in REGENERATE:
                print(f"{artefact}: {command}")
    except PinsError as exc:
        print(f"pins: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
