#!/usr/bin/env python3
"""Kernel audit of the sglang-sm120 image: which GPU architectures every CUDA binary carries.

    kernel_audit.py --required audit-required.yaml --json OUT [--root DIR]... [--cuobjdump PATH]

Walks every file under the roots (default: the venv's site-packages, where every kernel of the image
lives) and records, per installed distribution, the SASS (cubin) and PTX architectures it ships:
  - shared objects with an embedded fatbinary (an ELF section .nv_fatbin): `cuobjdump --list-elf
    --list-ptx`, one process per such library;
  - loose cubins (ELF files with e_machine EM_CUDA): the arch is read from the ELF header in Python,
    not one process per file (flashinfer-style cubin folders hold thousands);
  - loose fatbinaries (*.fatbin): cuobjdump; loose PTX (*.ptx): its `.target` line.
It also checks the two JIT toolchains that compile kernels at first use: nvcc ($CUDA_HOME) and
Triton's bundled ptxas, each asked to assemble a tiny sm_<target>a kernel.

Then it checks the entries of audit-required.yaml (what the shipped topologies need; a reason per
entry): each must have, for the target GPU, SASS that runs on it or PTX its driver can JIT. Prints a
table to stdout (the build log) and writes the JSON report (schema in images/sglang/README.md).
Exit codes: 0 all required entries run on the target, 1 at least one does not, 64 usage error.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import sysconfig
import tempfile
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

SCHEMA_VERSION = 1
EXIT_OK, EXIT_MISSING, EXIT_USAGE = 0, 1, 64
ELF_MAGIC = b"\x7fELF"
EM_CUDA = 190  # ELF e_machine for NVIDIA CUDA (elf.h)
ELF_ABI_VERSION_OFFSET = 8  # e_ident[EI_ABIVERSION]
# From CUDA ELF ABI version 8 on (nvcc 12.8+) the SM number sits in bits 8-15 of e_flags; before
# that in bits 0-7 (roles/cuda_toolkit/files/cubin_arch.py reads the same layout).
ABI_WITH_SHIFTED_SM = 8
TOOLKIT_NOTE_SECTION = b".note.nv.tkinfo"  # holds the ptxas command line, e.g. "-arch sm_120a"
FATBIN_SECTION = b".nv_fatbin"
CUOBJDUMP_TIMEOUT_S = 600
TOOL_TIMEOUT_S = 120
# cuobjdump names embedded files "<lib>.<n>.sm_120a.cubin" / "<lib>.<n>.sm_90.ptx".
LISTED = re.compile(r"^(ELF|PTX) file\s+\d+:\s+\S*?\.?(sm_\d+[af]?)\.(cubin|ptx)\s*$")
PTX_TARGET = re.compile(rb"^\s*\.target\s+(sm_\d+[af]?)", re.MULTILINE)
ARCH = re.compile(r"^(?:sm|compute)_(\d+)([af]?)$")
# PTX ISA 8.7 is the first with sm_120 targets (CUDA 12.8); every ptxas that knows sm_120a reads it.
PROBE_PTX = """.version 8.7
.target {arch}
.address_size 64
.visible .entry sglnode_probe() {{ ret; }}
"""


def parse_arch(name: str) -> tuple[int, str]:
    match = ARCH.match(name)
    if not match:
        raise ValueError(f"not an arch name: {name}")
    return int(match.group(1)), match.group(2)


def sass_runs_on(arch: str, target: int) -> bool:
    """SASS is binary compatible only within one major version, upwards in minor: sm_XY runs on
    compute capability X.Z for Z >= Y. Arch-specific sm_XYa runs on X.Y exactly; family sm_XYf on
    every X.Z with Z >= Y. So on the node's GPU exactly sm_120, sm_120a and sm_120f run; sm_100* and
    sm_121* do not."""
    number, _suffix = parse_arch(arch)
    return number // 10 == target // 10 and number % 10 <= target % 10


def ptx_jits_on(arch: str, target: int) -> bool:
    """The driver JIT-compiles PTX for the GPU it runs on. Plain compute_X PTX compiles for every GPU
    of compute capability >= X (that is how PTX carries a kernel forward to newer GPUs). Arch-specific
    compute_Xa PTX uses instructions of X only and compiles for X exactly; family compute_Xf PTX for
    the same major with minor >= X's. So on the node's GPU: compute_X for X <= 120, compute_120a,
    compute_120f; never compute_100a/100f (Blackwell datacenter) or compute_90a (Hopper). (The driver
    must also know the PTX ISA version: PTX from a toolkit newer than the driver does not JIT.)"""
    number, suffix = parse_arch(arch)
    if suffix == "a":
        return number == target
    if suffix == "f":
        return number // 10 == target // 10 and number % 10 <= target % 10
    return number <= target


def arch_key(name: str) -> tuple[int, str]:
    return parse_arch(name)


@dataclass
class Binary:
    path: str  # relative to its root
    kind: str  # "shared-object", "cubin", "fatbin", "ptx"
    sass: set[str] = field(default_factory=set)
    ptx: set[str] = field(default_factory=set)

    def verdict(self, target: int) -> str:
        if any(sass_runs_on(a, target) for a in self.sass):
            return "sass"
        if any(ptx_jits_on("compute_" + a.split("_", 1)[1], target) for a in self.ptx):
            return "ptx-jit"
        return "none"


# ------------------------------------------------------------------------------------------------
# ELF reading


def elf_sections(head: bytes, handle) -> dict[bytes, tuple[int, int]]:  # noqa: ANN001
    """Section name -> (offset, size) of a 64-bit little-endian ELF, reading only the headers."""
    e_shoff = struct.unpack_from("<Q", head, 0x28)[0]
    e_shentsize, e_shnum, e_shstrndx = struct.unpack_from("<HHH", head, 0x3A)
    if not e_shoff or not e_shnum or e_shstrndx >= e_shnum:
        return {}
    handle.seek(e_shoff)
    table = handle.read(e_shentsize * e_shnum)
    headers = [struct.unpack_from("<IIQQQQ", table, i * e_shentsize) for i in range(e_shnum)]
    strtab_offset, strtab_size = headers[e_shstrndx][4], headers[e_shstrndx][5]
    handle.seek(strtab_offset)
    strtab = handle.read(strtab_size)
    return {strtab[h[0] : strtab.find(b"\0", h[0])]: (h[4], h[5]) for h in headers}


def cubin_arch(head: bytes, handle) -> str:  # noqa: ANN001
    """sm_XY[a|f] of a cubin. The number is in e_flags; whether it was built arch-specific (a) or
    family-specific (f) is not (nvcc 13 writes the same e_flags for sm_120, sm_120a and sm_120f),
    so the suffix comes from the ptxas command line nvcc records in .note.nv.tkinfo ("-arch sm_120a")."""
    flags = struct.unpack_from("<I", head, 0x30)[0]
    shifted = head[ELF_ABI_VERSION_OFFSET] >= ABI_WITH_SHIFTED_SM
    number = (flags >> 8) & 0xFF if shifted else flags & 0xFF
    note = elf_sections(head, handle).get(TOOLKIT_NOTE_SECTION)
    if note:
        handle.seek(note[0])
        recorded = re.search(rb"-arch (sm_([0-9]+)[af]?)", handle.read(note[1]))
        if recorded and int(recorded.group(2)) == number:
            return recorded.group(1).decode()
    return f"sm_{number}"


def classify(path: Path) -> str | None:
    """'cubin', 'shared-object' (host ELF with a fatbinary), 'fatbin', 'ptx' or None."""
    name = path.name
    if name.endswith(".ptx"):
        return "ptx"
    if name.endswith(".fatbin"):
        return "fatbin"
    try:
        with path.open("rb") as handle:
            head = handle.read(64)
            if len(head) < 64 or head[:4] != ELF_MAGIC or head[4] != 2:  # 64-bit ELF only
                return None
            if struct.unpack_from("<H", head, 0x12)[0] == EM_CUDA:
                return "cubin"
            return "shared-object" if FATBIN_SECTION in elf_sections(head, handle) else None
    except (OSError, struct.error, IndexError):
        return None


def cuobjdump_listing(cuobjdump: str, path: Path) -> tuple[set[str], set[str]]:
    # Exit status is non-zero when a file has no PTX or no ELF part: the listing is the finding.
    result = subprocess.run(
        [cuobjdump, "--list-elf", "--list-ptx", str(path)],
        capture_output=True,
        text=True,
        timeout=CUOBJDUMP_TIMEOUT_S,
        check=False,
    )
    sass, ptx = set(), set()
    for line in result.stdout.splitlines():
        match = LISTED.match(line.strip())
        if match:
            (sass if match.group(1) == "ELF" else ptx).add(match.group(2))
    return sass, ptx


def inspect(path: Path, kind: str, root: Path, cuobjdump: str) -> Binary:
    binary = Binary(str(path.relative_to(root)), kind)
    if kind == "cubin":
        with path.open("rb") as handle:
            binary.sass.add(cubin_arch(handle.read(64), handle))
    elif kind == "ptx":
        binary.ptx.update(m.decode() for m in PTX_TARGET.findall(path.read_bytes()[:65536]))
    else:
        binary.sass, binary.ptx = cuobjdump_listing(cuobjdump, path)
    return binary


# ------------------------------------------------------------------------------------------------
# Which distribution owns a file


def file_owners(root: Path) -> dict[str, tuple[str, str]]:
    owners: dict[str, tuple[str, str]] = {}
    for dist in importlib.metadata.distributions(path=[str(root)]):
        name = dist.metadata["Name"]
        for file in dist.files or []:
            owners[os.path.normpath(str(file))] = (name, dist.version)
    return owners


def scan(roots: list[Path], cuobjdump: str, jobs: int) -> dict[str, dict[str, object]]:
    found: list[tuple[Path, str, Path]] = []
    for root in roots:
        for directory, _dirs, files in os.walk(root):
            for name in files:
                path = Path(directory, name)
                if path.is_symlink():
                    continue
                kind = classify(path)
                if kind:
                    found.append((path, kind, root))
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        binaries = list(
            pool.map(lambda item: (item[2], inspect(item[0], item[1], item[2], cuobjdump)), found)
        )

    owners = {root: file_owners(root) for root in roots}
    packages: dict[str, dict[str, object]] = {}
    for root, binary in binaries:
        name, version = owners[root].get(os.path.normpath(binary.path), ("(no distribution)", ""))
        package = packages.setdefault(name, {"version": version, "binaries": []})
        package["binaries"].append(binary)  # type: ignore[union-attr]
    return packages


# ------------------------------------------------------------------------------------------------
# JIT toolchains


def probe_assembler(command: list[str], arch: str) -> dict[str, object]:
    """Asks an assembler (ptxas, or nvcc on PTX input) to build a one-instruction kernel for arch."""
    if not command or not Path(command[0]).is_file():
        return {"path": command[0] if command else None, "present": False, "accepts": False}
    version = subprocess.run(
        [command[0], "--version"], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False
    )
    with tempfile.TemporaryDirectory() as work:
        source = Path(work, "probe.ptx")
        source.write_text(PROBE_PTX.format(arch=arch))
        out = Path(work, "probe.cubin")
        if Path(command[0]).name == "nvcc":
            args = [*command, "--cubin", f"-arch={arch}", "-o", str(out), str(source)]
        else:
            args = [*command, f"--gpu-name={arch}", "-o", str(out), str(source)]
        result = subprocess.run(args, capture_output=True, text=True, timeout=TOOL_TIMEOUT_S, check=False)
        built = result.returncode == 0 and out.is_file()
        if built:
            with out.open("rb") as handle:
                produced = cubin_arch(handle.read(64), handle)
        else:
            produced = None
    return {
        "path": command[0],
        "present": True,
        "version": version.stdout.strip().splitlines()[-1] if version.stdout.strip() else "",
        "accepts": built and produced == arch,
        "produced": produced,
        "error": "" if built else (result.stderr or result.stdout).strip()[-500:],
    }


def toolchains(site_packages: Path, target: int) -> dict[str, dict[str, object]]:
    arch = f"sm_{target}a"
    cuda_home = Path(os.environ.get("CUDA_HOME", "/usr/local/cuda"))
    ptxas = site_packages / "triton" / "backends" / "nvidia" / "bin" / "ptxas"
    return {
        "nvcc": {**probe_assembler([str(cuda_home / "bin" / "nvcc")], arch), "cuda_home": str(cuda_home)},
        "triton-ptxas": probe_assembler([str(ptxas)], arch),
    }


# ------------------------------------------------------------------------------------------------
# Required entries


def load_required(path: Path) -> dict[str, object]:
    """audit-required.yaml, read without PyYAML (the image need not have it): a small YAML subset
    written for this file, checked for the keys each entry needs."""
    try:
        import yaml  # noqa: PLC0415
    except ImportError:  # pragma: no cover - the image has PyYAML (transformers needs it)
        raise SystemExit("kernel_audit: PyYAML is needed to read " + str(path)) from None
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, dict) or "target_sm" not in data or "required" not in data:
        raise SystemExit(f"{path}: needs target_sm and required")
    for entry in data["required"]:
        if not {"name", "reason"} <= set(entry) or ("files" in entry) == ("toolchain" in entry):
            raise SystemExit(f"{path}: entry {entry!r} needs name, reason and one of files/toolchain")
    for entry in data.get("jit_packages", []):
        if not {"package", "note"} <= set(entry):
            raise SystemExit(f"{path}: jit_packages entry {entry!r} needs package and note")
    return data


def installed_distributions(root: Path) -> dict[str, str]:
    """name -> version of every distribution installed under root, sorted by name."""
    found = {
        dist.metadata["Name"]: dist.version for dist in importlib.metadata.distributions(path=[str(root)])
    }
    return dict(sorted(found.items(), key=lambda item: item[0].lower()))


def jit_packages(
    entries: list[dict[str, str]], packages: dict[str, dict[str, object]], root: Path
) -> dict[str, object]:
    """Kernel packages that compile their kernels at first use: installed version and what they ship."""
    installed = {
        dist.metadata["Name"].lower(): dist.version
        for dist in importlib.metadata.distributions(path=[str(root)])
    }
    report = {}
    for entry in entries:
        name = entry["package"]
        binaries = packages.get(name, {}).get("binaries", [])
        report[name] = {
            "version": installed.get(name.lower()),
            "installed": name.lower() in installed,
            "shipped_binaries": len(binaries),  # type: ignore[arg-type]
            "note": entry["note"],
        }
    return report


def check_required(
    required: list[dict[str, object]],
    packages: dict[str, dict[str, object]],
    tools: dict[str, dict[str, object]],
    target: int,
) -> list[dict[str, object]]:
    from fnmatch import fnmatchcase  # noqa: PLC0415

    results = []
    for entry in required:
        result: dict[str, object] = {"name": entry["name"], "reason": entry["reason"]}
        if "toolchain" in entry:
            tool = tools.get(str(entry["toolchain"]), {})
            result.update(toolchain=entry["toolchain"], verdict="jit" if tool.get("accepts") else "none")
        else:
            package = packages.get(str(entry.get("package", "")), {"binaries": []})
            matched = [
                b
                for b in package["binaries"]
                if any(fnmatchcase(b.path, str(p)) for p in entry["files"])  # type: ignore[union-attr]
            ]
            verdicts = {b.path: b.verdict(target) for b in matched}
            result.update(package=entry.get("package"), files=verdicts)
            if not matched:
                result["verdict"] = "missing"
            elif "none" in verdicts.values():
                result["verdict"] = "none"
            else:
                result["verdict"] = "ptx-jit" if "ptx-jit" in verdicts.values() else "sass"
        result["ok"] = result["verdict"] in {"sass", "ptx-jit", "jit"}
        results.append(result)
    return results


# ------------------------------------------------------------------------------------------------
# Report


def sorted_archs(archs: set[str]) -> list[str]:
    return sorted(archs, key=arch_key)


def package_report(name: str, package: dict[str, object], target: int) -> dict[str, object]:
    binaries: list[Binary] = package["binaries"]  # type: ignore[assignment]
    sass = set().union(*(b.sass for b in binaries))
    ptx = {"compute_" + a.split("_", 1)[1] for b in binaries for a in b.ptx}
    verdicts = [b.verdict(target) for b in binaries]
    cubins: dict[str, int] = defaultdict(int)
    for b in binaries:
        if b.kind == "cubin":
            cubins[next(iter(b.sass))] += 1
    return {
        "version": package["version"],
        "files": len(binaries),
        "sass": sorted_archs(sass),
        "ptx": sorted_archs(ptx),
        "target": {
            "sass": verdicts.count("sass"),
            "ptx_jit": verdicts.count("ptx-jit"),
            "none": verdicts.count("none"),
        },
        "loose_cubins": dict(sorted(cubins.items(), key=lambda item: arch_key(item[0]))),
        "libraries": [
            {
                "path": b.path,
                "kind": b.kind,
                "sass": sorted_archs(b.sass),
                "ptx": sorted_archs({"compute_" + a.split("_", 1)[1] for a in b.ptx}),
                "target": b.verdict(target),
            }
            for b in sorted(binaries, key=lambda b: b.path)
            if b.kind != "cubin"
        ],
    }


def short(archs: list[str], limit: int = 7) -> str:
    names = [a.removeprefix("sm_").removeprefix("compute_") for a in archs]
    return (
        ",".join(names)
        if len(names) <= limit
        else ",".join(names[: limit - 1]) + f",..+{len(names) - limit + 1}"
    )


def table(report: dict[str, object]) -> str:
    target = report["target_sm"]
    lines = [
        f"kernel audit: target sm_{target}; per distribution with device code (files: CUDA binaries;"
        f" sm_{target}: S = SASS runs, P = only PTX JIT, - = neither)",
        f"{'package':34} {'version':18} {'files':>6}  {'sm_' + str(target):>10}  {'SASS':40} PTX",
    ]
    for name, package in report["packages"].items():  # type: ignore[union-attr]
        counts = package["target"]
        mark = f"S{counts['sass']}/P{counts['ptx_jit']}/-{counts['none']}"
        lines.append(
            f"{name[:34]:34} {package['version'][:18]:18} {package['files']:>6}  {mark:>10}  "
            f"{short(package['sass']):40} {short(package['ptx'])}"
        )
    if report.get("jit_packages"):
        lines.append("")
        lines.append("kernel packages that compile at first use (audit-required.yaml jit_packages):")
        for name, package in report["jit_packages"].items():  # type: ignore[union-attr]
            version = package["version"] or "not installed"
            lines.append(
                f"  {name[:32]:32} {version[:18]:18} shipped CUDA binaries: {package['shipped_binaries']}"
            )
    lines.append("")
    lines.append(f"JIT toolchains (assemble an sm_{target}a kernel):")
    for name, tool in report["toolchains"].items():  # type: ignore[union-attr]
        state = "ok" if tool.get("accepts") else "NO"
        lines.append(f"  {state:3} {name:13} {tool.get('path')}  {tool.get('version', '')}")
    lines.append("")
    lines.append("required by the shipped topologies (audit-required.yaml):")
    for entry in report["required"]:  # type: ignore[union-attr]
        state = "ok" if entry["ok"] else "FAIL"
        lines.append(f"  {state:4} {entry['verdict']:8} {entry['name']}")
        if not entry["ok"]:
            for path, verdict in entry.get("files", {}).items():
                lines.append(f"         {verdict:8} {path}")
            lines.append(f"         needed because: {entry['reason']}")
    return "\n".join(lines)


def find_cuobjdump(site_packages: Path) -> str | None:
    candidates = [shutil.which("cuobjdump"), str(site_packages / "nvidia" / "cu13" / "bin" / "cuobjdump")]
    return next((c for c in candidates if c and os.access(c, os.X_OK)), None)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Kernel audit: SASS/PTX arches of every CUDA binary.")
    parser.add_argument("--required", type=Path, required=True, help="audit-required.yaml")
    parser.add_argument("--json", type=Path, required=True, help="where to write the report")
    parser.add_argument("--root", type=Path, action="append", help="folder to walk (default site-packages)")
    parser.add_argument("--cuobjdump", help="cuobjdump to use (default PATH, then the nvidia wheel's)")
    parser.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)))
    try:
        options = parser.parse_args(argv)
    except SystemExit as error:
        return EXIT_USAGE if error.code else EXIT_OK

    site_packages = Path(sysconfig.get_paths()["platlib"])
    roots = [root.resolve() for root in (options.root or [site_packages])]
    cuobjdump = options.cuobjdump or find_cuobjdump(site_packages)
    if not cuobjdump or not os.access(cuobjdump, os.X_OK):
        print("kernel_audit: cuobjdump not found (nvidia-cuda-cuobjdump) or not executable", file=sys.stderr)
        return EXIT_USAGE
    spec = load_required(options.required)
    target = int(spec["target_sm"])

    packages = scan(roots, cuobjdump, options.jobs)
    tools = toolchains(site_packages, target)
    report: dict[str, object] = {
        "schema": SCHEMA_VERSION,
        "target_sm": target,
        "roots": [str(root) for root in roots],
        "cuobjdump": cuobjdump,
        "python": ".".join(map(str, sys.version_info[:3])),
        "packages": {
            name: package_report(name, packages[name], target) for name in sorted(packages, key=str.lower)
        },
        "jit_packages": jit_packages(spec.get("jit_packages", []), packages, roots[0]),
        # Every installed distribution, device code or not (a backend such as Mooncake's transfer
        # engine is checked for presence by `sglnode topology check`).
        "distributions": installed_distributions(roots[0]),
        "toolchains": tools,
        "required": check_required(spec["required"], packages, tools, target),
    }
    report["ok"] = all(entry["ok"] for entry in report["required"])  # type: ignore[union-attr]
    options.json.parent.mkdir(parents=True, exist_ok=True)
    options.json.write_text(json.dumps(report, indent=1, sort_keys=False) + "\n")
    print(table(report))
    print(f"\nkernel audit: {'ok' if report['ok'] else 'FAILED'}; report {options.json}")
    return EXIT_OK if report["ok"] else EXIT_MISSING


if __name__ == "__main__":
    sys.exit(main())
