"""Where a pinned value is written outside tools/sglnode/pins.yaml (tools/tests/test_pins.py).

Every tracked text file is scanned for every pinned value (versions, image references, ports, the
GPU's facts) as a literal with number boundaries: a version V matches in "sglang==V" and in
"sglang-V-memory", not inside a longer number or version. Names that are also plain words of the prose
(the GPU's arch name, its model, the image repositories, the preset name) are scanned only where they
configure something: the non-comment text of role defaults/vars/templates, the inventories,
Dockerfiles and build scripts.

The allowlist is short and explicit: the pins file and the hardware preset it names (the sources),
artefacts generated from upstream or from the image (regenerated on a bump, see
`python3 tools/sglnode/pins.py regenerate`), verbatim fixtures, the lines and blocks `pins.py sync`
generates, and a few files where a number equals a pin but states another fact.

    python3 tools/tests/pins_scan.py        print every hit (what test_pins.py fails on)
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "tools"))

from sglnode import pins as pins_module  # noqa: E402

# Files that hold pinned values on purpose. (path glob, reason)
ALLOWED_FILES: tuple[tuple[str, str], ...] = (
    ("tools/sglnode/pins.yaml", "the pins"),
    ("tools/sglnode/planning/hardware/*.yaml", "hardware presets: the GPU facts' one place"),
    ("images/sglang/requirements.lock", "generated: tools/setup/lock-image.sh"),
    ("images/router/requirements.txt", "generated: pip freeze of the router image"),
    ("tools/sglnode/topology/kernel-audit.json", "generated: the image's kernel audit"),
    ("tools/sglnode/topology/sglang_flags.yaml", "generated: the pinned wheel's argparse"),
    ("tools/sglnode/upstream/sglang-strings.yaml", "generated: the pinned wheel's strings"),
    ("tools/sglnode/upstream/wheels.yaml", "generated: the pinned wheels' hashes"),
    ("tools/tests/fixtures/oracle/*", "generated: SGLang's own memory resolution in the image"),
    ("tools/tests/fixtures/corpus/*", "verbatim: real logs of many engines"),
    ("tools/tests/fixtures/logs/*", "verbatim: SGLang logs"),
    ("tools/tests/fixtures/library-messages/*", "verbatim: messages quoted from many libraries' sources"),
    ("tools/tests/fixtures/phase-evidence/*", "verbatim: engines' start-up lines quoted from their sources"),
    ("tools/tests/fixtures/records/*", "verbatim: whole failure records quoted from the libraries' sources"),
    ("tools/tests/fixtures/tune/*", "verbatim: a sweep's recorded output"),
    ("molecule/shared/*", "test fixture: the fixture apt repo's package versions"),
    ("molecule/driver_upgrade/*", "test fixture: moves between the fixture repo's driver versions"),
)
# A pin in a file where the same number states another fact. (path, pins key, reason)
ALLOWED_VALUES: tuple[tuple[str, str, str], ...] = (
    ("pyproject.toml", "sglnode", "wheel metadata is static; test_pins checks it equals the pin"),
    ("roles/cuda_toolkit/vars/main.yml", "driver_branch", "oldest branch per CUDA major (a table)"),
    ("roles/cuda_toolkit/vars/main.yml", "gpu.compute_capability", "oldest CUDA per capability (a table)"),
    ("roles/nvidia_driver/vars/Ubuntu.yml", "driver_branch", "branch-named distro packages (a list)"),
    ("molecule/cuda_toolkit/molecule.yml", "cuda", "the CI host's toolkit mount; test_pins checks it"),
    ("tools/tests/test_upstream_diff.py", "sglang", "two historical releases the diff command compares"),
    ("tools/tests/test_host_roles_bad_vars.py", "driver_branch", "CUDA 13's oldest branch"),
)
# Generated lines (pins.py sync) inside otherwise hand-written files.
GENERATED_LINES = {path for path, _, _ in pins_module.REQUIREMENT_LINES}
GENERATED_BLOCKS = {pins_module.README: (pins_module.TABLE_BEGIN, pins_module.TABLE_END)}

# Keys scanned everywhere; keys scanned only in configuration (names that are also prose).
STRICT_KEYS = (
    *("sglnode", "sglang", "torch", "flashinfer", "sglang_kernel", "cuda", "cuda_wheels", "cuobjdump"),
    *("nixl", "mooncake", "sglang_router", "driver_branch", "nccl", "cudnn", "flash_attn", "deepep"),
    *("base_image", "cuda_tag", "gpu.device_name", "gpu.cuda_arch"),
)
# Ports, the GPU's memory and its compute capability are also plain numbers in tests and prose (a URL
# to parse, an nvidia-smi line, a latency); they are pins where something is configured or computed
# from them: the configuration files and the package's code.
CODE_KEYS = (
    "ports.sglang",
    "ports.bootstrap",
    "ports.router",
    "ports.router_prometheus",
    "gpu.memory_mib",
    "gpu.compute_capability",
)
CODE_FILES = ("tools/sglnode/*.py",)
CONFIG_KEYS = (
    *CODE_KEYS,
    "gpu.sm",
    "gpu.sm_arch_specific",
    "gpu.model",
    "gpu.preset",
    "images.sglang",
    "images.router",
    "images.sim",
)
CONFIG_FILES = (
    "roles/*/defaults/*.yml",
    "roles/*/vars/*.yml",
    "roles/*/templates/*",
    "inventory/*/group_vars/*/*.yml",
    "inventory/topologies/*.yml",
    "images/*/Dockerfile",
    "images/*.sh",
    "images/*/*.sh",
    "tools/setup/*.sh",
    "tools/gpu/*.sh",
    "tools/demo/*.sh",
)
# Verbatim log lines: the examples of the diagnosis rules and vocabulary (quoted YAML list items).
VERBATIM_LINES = ("tools/sglnode/diagnosis/*.yaml", "tools/sglnode/diagnosis/rules/*.yaml")
VERBATIM_LINE = re.compile(r"""^\s*- ['"].*$""", re.MULTILINE)
COMMENT = re.compile(r"(^|\s)#.*$", re.MULTILINE)


@dataclass(frozen=True)
class Hit:
    path: str
    line: int
    key: str
    value: str
    text: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.key}={self.value!r}: {self.text.strip()[:120]}"


def pattern(value: str) -> re.Pattern[str]:
    """The value as a literal, not inside a longer number or version; also as a regex writes it
    ("0\\.5" for "0.5")."""
    before = r"(?<![0-9.])" if value[0].isdigit() else r"(?<![A-Za-z0-9_])"
    after = r"(?![0-9]|\\?\.[0-9])" if value[-1].isdigit() else r"(?![A-Za-z0-9_])"
    spellings = {re.escape(value), re.escape(value.replace(".", "\\."))}
    return re.compile(before + "(?:" + "|".join(sorted(spellings)) + ")" + after)


def scanned_values(values: pins_module.Pins) -> dict[str, tuple[str, bool]]:
    """pins key -> (value, strict). A key whose value another key already has is scanned once."""
    seen: dict[str, tuple[str, bool]] = {}
    for key in STRICT_KEYS + CONFIG_KEYS:
        value = str(values.get(key))
        if value not in {v for v, _ in seen.values()}:
            seen[key] = (value, key in STRICT_KEYS)
    # The patch release of the CUDA wheels as image labels and READMEs write it (13.x.y of 13.x.y.0).
    three = ".".join(values.cuda_wheels.split(".")[:3])
    if three != values.cuda_wheels:
        seen["cuda_wheels (major.minor.patch)"] = (three, True)
    # The CUDA release of the base image's tag.
    base_cuda = re.search(r":(\d+\.\d+\.\d+)", values.base_image)
    if base_cuda:
        seen["base_image (CUDA release)"] = (base_cuda.group(1), True)
    return seen


def tracked_files(repo: Path) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        cwd=repo,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return sorted({path for path in out.split("\0") if path})


def _matches(path: str, globs: tuple[str, ...] | list[str]) -> bool:
    return any(fnmatch.fnmatchcase(path, glob) for glob in globs)


def _blank(text: str, start: int, end: int) -> str:
    """The text with [start, end) replaced by as many newlines, so line numbers stay right."""
    return text[:start] + "\n" * text.count("\n", start, end) + text[end:]


def scan(repo: Path = REPO_ROOT, values: pins_module.Pins | None = None) -> list[Hit]:
    values = values or pins_module.load(
        repo / "tools/sglnode/pins.yaml", repo / "tools/sglnode/planning/hardware"
    )
    keys = scanned_values(values)
    patterns = {key: (value, pattern(value), strict) for key, (value, strict) in keys.items()}
    allowed_files = [glob for glob, _ in ALLOWED_FILES]
    hits: list[Hit] = []
    for path in tracked_files(repo):
        full = repo / path
        if _matches(path, allowed_files) or full.is_symlink() or not full.is_file():
            continue
        try:
            text = full.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue  # binary
        if path in GENERATED_LINES:
            text = re.sub(r"^[A-Za-z0-9][A-Za-z0-9._\[\],-]*==\S+$", "", text, flags=re.MULTILINE)
        if path in GENERATED_BLOCKS:
            begin, end = GENERATED_BLOCKS[path]
            first, last = text.find(begin), text.find(end)
            if 0 <= first < last:
                text = _blank(text, first, last)
        if _matches(path, VERBATIM_LINES):
            text = VERBATIM_LINE.sub("", text)
        config_text = COMMENT.sub(r"\1", text) if _matches(path, CONFIG_FILES + CODE_FILES) else None
        code_only = not _matches(path, CONFIG_FILES)
        allowed_keys = {key for allowed_path, key, _ in ALLOWED_VALUES if allowed_path == path}
        for key, (value, regex, strict) in patterns.items():
            if key in allowed_keys:
                continue
            haystack = text if strict else config_text
            if code_only and not strict and key not in CODE_KEYS:
                continue
            if haystack is None:
                continue
            for match in regex.finditer(haystack):
                number = haystack.count("\n", 0, match.start()) + 1
                hits.append(Hit(path, number, key, value, haystack.splitlines()[number - 1]))
    return hits


if __name__ == "__main__":
    found = scan()
    for hit in found:
        print(hit)
    print(f"{len(found)} hits in {len({hit.path for hit in found})} files", file=sys.stderr)
    sys.exit(1 if found else 0)
