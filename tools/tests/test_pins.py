"""tools/sglnode/pins.yaml is the one place for every pin (issue 17.1).

- nothing else in the repository restates a pinned value (pins_scan.py; the scan itself is tested on
  a small repository that does restate one);
- the generated lines and the README table agree with the pins, and so do the artefacts regenerated
  from upstream or from the image (the lock, the flag catalogue, the wheel hashes, the kernel audit,
  the oracle snapshot): a bump without them fails here, naming what to regenerate;
- a bump is one changed line in pins.yaml plus `pins.py sync`: in a copy of this checkout the
  Python package, the Ansible lookup behind the role defaults and the compose renderer all see the
  new value, and only the pins file and the generated files differ.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pins_scan
import pytest
import yaml

from sglnode import pins as pins_module
from sglnode.pins import PINS

REPO = Path(__file__).resolve().parents[2]
PINS_FILE = REPO / "tools" / "sglnode" / "pins.yaml"
RUN_TIMEOUT_S = 120


def test_no_file_restates_a_pinned_value():
    hits = pins_scan.scan(REPO)
    assert hits == [], "pinned values written outside tools/sglnode/pins.yaml:\n" + "\n".join(
        str(hit) for hit in hits[:40]
    )


def _git_repo(root: Path, files: dict[str, str]) -> None:
    for relative, text in files.items():
        (root / relative).parent.mkdir(parents=True, exist_ok=True)
        (root / relative).write_text(text, encoding="utf-8")
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    subprocess.run(["git", "-C", str(root), "add", "-A"], check=True)


def test_the_scan_finds_a_restated_pin(tmp_path):
    files = {
        "tools/sglnode/pins.yaml": PINS_FILE.read_text(encoding="utf-8"),
        f"tools/sglnode/planning/hardware/{PINS.gpu.preset}.yaml": (
            REPO / "tools/sglnode/planning/hardware" / f"{PINS.gpu.preset}.yaml"
        ).read_text(encoding="utf-8"),
        "roles/x/defaults/main.yml": (
            f'x_sglang: "{PINS.sglang}"\nx_port: {PINS.ports.router}\n# built for {PINS.gpu.sm}\n'
        ),
        "docs/x.md": f"Built for torch {PINS.torch}; port {PINS.ports.sglang} is only an example here.\n",
        "docs/y.md": f"torch {PINS.torch}1 and {PINS.sglang}.9 are other versions.\n",
    }
    _git_repo(tmp_path, files)
    found = {(hit.path, hit.key) for hit in pins_scan.scan(tmp_path)}
    assert ("roles/x/defaults/main.yml", "sglang") in found
    assert ("roles/x/defaults/main.yml", "ports.sglang") in found  # router's port = sglang's, scanned once
    assert ("docs/x.md", "torch") in found
    # A comment in configuration, a sample port in prose and longer versions are not pins.
    assert ("roles/x/defaults/main.yml", "gpu.sm") not in found
    assert ("docs/x.md", "ports.sglang") not in found
    assert not any(path == "docs/y.md" for path, _ in found)


@pytest.mark.parametrize(
    "path",
    [PINS_FILE, REPO / "tools/sglnode/planning/hardware" / f"{PINS.gpu.preset}.yaml"],
    ids=["pins", "preset"],
)
def test_the_stdlib_reader_agrees_with_pyyaml(path):
    # Build scripts may run pins.py with a bare python3 (no PyYAML): its own reader must read the same.
    text = path.read_text(encoding="utf-8")
    assert pins_module.parse_simple_yaml(text, str(path)) == yaml.safe_load(text)


def test_pins_load_the_same_without_pyyaml(monkeypatch):
    monkeypatch.setitem(sys.modules, "yaml", None)  # `import yaml` raises ImportError
    assert pins_module.load() == PINS


def test_generated_lines_and_the_readme_table_follow_the_pins():
    assert pins_module.sync(REPO, PINS, check=True) == [], f"run {pins_module.SYNC_COMMAND}"


def _locked(text: str) -> dict[str, str]:
    return dict(re.findall(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+?)(?: \\)?$", text, flags=re.MULTILINE))


def test_regenerated_artefacts_are_of_the_pinned_releases():
    """What `pins.py regenerate` lists: stale after a bump until regenerated, and then this passes."""
    lock = _locked((REPO / "images/sglang/requirements.lock").read_text(encoding="utf-8"))
    for package, key in [
        ("sglang", "sglang"),
        ("torch", "torch"),
        ("flashinfer-python", "flashinfer"),
        ("sglang-kernel", "sglang_kernel"),
        ("cuda-toolkit", "cuda_wheels"),
        ("nvidia-cuda-cuobjdump", "cuobjdump"),
        ("nixl-cu13", "nixl"),
        ("mooncake-transfer-engine-cuda13", "mooncake"),
    ]:
        assert lock.get(package) == str(PINS.get(key)), f"images/sglang/requirements.lock: {package}"
    flags = yaml.safe_load((REPO / "tools/sglnode/topology/sglang_flags.yaml").read_text(encoding="utf-8"))
    assert str(flags["sglang_version"]) == PINS.sglang
    wheels = yaml.safe_load((REPO / "tools/sglnode/upstream/wheels.yaml").read_text(encoding="utf-8"))
    assert (wheels["sglang"]["version"], wheels["sglang-router"]["version"]) == (
        PINS.sglang,
        PINS.sglang_router,
    )
    strings = yaml.safe_load(
        (REPO / "tools/sglnode/upstream/sglang-strings.yaml").read_text(encoding="utf-8")
    )
    assert str(strings["sglang_version"]) == PINS.sglang
    audit = json.loads((REPO / "tools/sglnode/topology/kernel-audit.json").read_text(encoding="utf-8"))
    built = audit["distributions"]
    assert (built["sglang"], built["torch"], built["sglang-kernel"]) == (
        PINS.sglang,
        PINS.torch,
        PINS.sglang_kernel,
    )
    assert audit["target_sm"] == int(PINS.gpu.sm_number)
    assert (REPO / "tools/tests/fixtures/oracle" / f"sglang-{PINS.sglang}-memory.jsonl").is_file()


def _copy_checkout(destination: Path) -> None:
    """The tracked (and new, not ignored) files of this checkout, as they are on disk."""
    for relative in pins_scan.tracked_files(REPO):
        source = REPO / relative
        if source.is_symlink() or not source.is_file():
            continue
        (destination / relative).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination / relative)


def _snapshot(root: Path) -> dict[str, bytes]:
    files = (p for p in root.rglob("*") if p.is_file() and ".git" not in p.relative_to(root).parts)
    return {str(p.relative_to(root)): p.read_bytes() for p in files}


def _run(argv: list[str], cwd: Path, **env: str) -> str:
    result = subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        env={**os.environ, **env},
        check=False,
    )
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    return result.stdout


@pytest.mark.parametrize(
    ("key", "generated"),
    [
        ("sglang_router", {"requirements/toolchain.txt", "README.md"}),
        (
            "sglang",
            {
                "images/sglang/requirements.in",
                "molecule/sglang_image/files/image/requirements.lock",
                "README.md",
            },
        ),
    ],
)
def test_a_bump_is_one_line_and_sync(tmp_path, key, generated):
    new = f"{PINS.get(key)}9"  # another release (written out here, it would be a restated pin itself)
    copy = tmp_path / "checkout"
    _copy_checkout(copy)
    _git_repo(copy, {})  # the scan lists files with git
    before = _snapshot(copy)
    pins_file = copy / "tools/sglnode/pins.yaml"
    text = pins_file.read_text(encoding="utf-8")
    line = re.compile(rf'^{key}: "{re.escape(str(PINS.get(key)))}"$', re.MULTILINE)
    assert len(line.findall(text)) == 1, f"{key} is not one line of pins.yaml"
    pins_file.write_text(line.sub(f'{key}: "{new}"', text), encoding="utf-8")

    script = str(copy / "tools/sglnode/pins.py")
    stale = subprocess.run(
        [sys.executable, script, "sync", "--check", "--repo", str(copy)],
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert stale.returncode == 1 and "pins.py sync" in stale.stderr  # forgetting sync fails, with the fix
    _run([sys.executable, script, "sync", "--repo", str(copy)], copy)

    after = _snapshot(copy)
    changed = {path for path in after if after[path] != before.get(path)}
    assert changed == {"tools/sglnode/pins.yaml", *generated}
    old_lines, new_lines = text.splitlines(), pins_file.read_text(encoding="utf-8").splitlines()
    assert len(old_lines) == len(new_lines)
    assert sum(a != b for a, b in zip(old_lines, new_lines, strict=True)) == 1

    # The package in the copy (what the renderer, planner, simulator and rollout import) sees the bump.
    probe = (
        "from sglnode.pins import PINS; "
        "from sglnode.topology.render import DEFAULT_SGLANG_IMAGE as S, DEFAULT_ROUTER_IMAGE as R; "
        "print(PINS.get('KEY'), S, R)"
    )
    value, sglang_image, router_image = _run(
        [sys.executable, "-c", probe.replace("KEY", key)], copy, PYTHONPATH=str(copy / "tools")
    ).split()
    assert value == new
    assert (new in sglang_image) if key == "sglang" else (router_image == f"{PINS.images.router}:{new}")

    # The role defaults read it through the lookup in the copy's plugins/ (ansible.cfg's lookup path).
    ansible = Path(sys.executable).parent / "ansible"
    msg = _run(
        [
            str(ansible),
            "localhost",
            "-c",
            "local",
            "-m",
            "ansible.builtin.debug",
            "-a",
            f"msg={{{{ lookup('sglnode_pins', '{key}') }}}}",
        ],
        copy,
        ANSIBLE_CONFIG=str(copy / "ansible.cfg"),
    )
    assert re.search(rf"""\bmsg\W+{re.escape(new)}\W*$""", msg, re.MULTILINE), msg

    # Nothing in the copy restates the new value (nor any other pin).
    assert [str(hit) for hit in pins_scan.scan(copy)] == []
