"""images/sglang/kernel_audit.py against real nvcc output: shared objects (cuobjdump), loose cubins
(ELF header, no process per file), PTX, the sm_120 rules, the required-entry verdicts and the report.

The fake site-packages is a folder with a dist-info RECORD per fake distribution, so files are
attributed to packages the way the image's real site-packages attributes them."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path

import pytest
from cuda_kernels import CUOBJDUMP, NVCC, SKIP_REASON, SM_90, SM_120A, compile_cubin, compile_kernel

REPO_ROOT = Path(__file__).resolve().parents[2]
AUDIT_SCRIPT = REPO_ROOT / "images" / "sglang" / "kernel_audit.py"
REQUIRED_FILE = REPO_ROOT / "images" / "sglang" / "audit-required.yaml"

pytestmark = pytest.mark.skipif(bool(SKIP_REASON), reason=SKIP_REASON)

_spec = importlib.util.spec_from_file_location("kernel_audit", AUDIT_SCRIPT)
audit = importlib.util.module_from_spec(_spec)
sys.modules["kernel_audit"] = audit
_spec.loader.exec_module(audit)


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("kernels")
    return {
        "sm120a.so": compile_kernel(out / "sm120a.so", SM_120A),
        "sm90.so": compile_kernel(out / "sm90.so", SM_90),
        # Hopper and Blackwell SASS in one fat binary, as most wheels ship.
        "fat.so": compile_kernel(out / "fat.so", SM_90, "arch=compute_120,code=sm_120"),
        # Plain compute_90 PTX and no sm_120 SASS: the driver JITs it forward.
        "ptx90.so": compile_kernel(out / "ptx90.so", SM_90, "arch=compute_90,code=compute_90"),
        # Arch-specific Hopper PTX: never JITs on another arch.
        "ptx90a.so": compile_kernel(out / "ptx90a.so", "arch=compute_90a,code=compute_90a"),
        "sm_120a.cubin": compile_cubin(out / "sm_120a.cubin", "sm_120a"),
        "sm_120.cubin": compile_cubin(out / "sm_120.cubin", "sm_120"),
        "sm_100a.cubin": compile_cubin(out / "sm_100a.cubin", "sm_100a"),
        "sm_90.cubin": compile_cubin(out / "sm_90.cubin", "sm_90"),
    }


def _site(root: Path, dists: dict[str, dict[str, Path]]) -> Path:
    """A site-packages: per distribution {relative path: source file}, with a RECORD naming them."""
    for name, files in dists.items():
        info = root / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir(parents=True)
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        record = [f"{info.name}/METADATA,,"]
        for relative, source in files.items():
            (root / relative).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, root / relative)
            record.append(f"{relative},,")
        (info / "RECORD").write_text("\n".join(record) + "\n")
    return root


def _required(path: Path, entries: str) -> Path:
    path.write_text("target_sm: 120\nrequired:\n" + entries)
    return path


# ---------------------------------------------------------------------------------------------- rules


@pytest.mark.parametrize(
    ("arch", "runs"),
    [
        ("sm_120", True),
        ("sm_120a", True),
        ("sm_120f", True),
        ("sm_121a", False),
        ("sm_100a", False),
        ("sm_90", False),
    ],
)
def test_sass_runs_only_on_the_same_major_with_no_higher_minor(arch, runs):
    assert audit.sass_runs_on(arch, 120) is runs


@pytest.mark.parametrize(
    ("arch", "jits"),
    [
        ("compute_80", True),
        ("compute_90", True),
        ("compute_120", True),
        ("compute_120a", True),
        ("compute_120f", True),
        ("compute_121", False),
        ("compute_90a", False),
        ("compute_100a", False),
        ("compute_100f", False),
    ],
)
def test_ptx_jits_forward_unless_arch_or_family_specific_to_another_gpu(arch, jits):
    assert audit.ptx_jits_on(arch, 120) is jits


# ---------------------------------------------------------------------------------------------- files


def test_shared_objects_are_read_with_cuobjdump(built, tmp_path):
    results = {}
    for name in ("sm120a.so", "sm90.so", "fat.so", "ptx90.so", "ptx90a.so"):
        assert audit.classify(built[name]) == "shared-object"
        results[name] = audit.inspect(built[name], "shared-object", built[name].parent, CUOBJDUMP)
    assert results["sm120a.so"].sass == {"sm_120a"}
    assert results["sm120a.so"].verdict(120) == "sass"
    assert results["sm90.so"].verdict(120) == "none"
    assert results["fat.so"].sass == {"sm_90", "sm_120"}
    assert results["fat.so"].verdict(120) == "sass"
    assert results["ptx90.so"].ptx == {"sm_90"}
    assert results["ptx90.so"].verdict(120) == "ptx-jit"
    assert results["ptx90a.so"].verdict(120) == "none"


def test_loose_cubins_are_read_from_the_elf_header_with_their_suffix(built):
    for arch in ("sm_120a", "sm_120", "sm_100a", "sm_90"):
        cubin = built[f"{arch}.cubin"]
        assert audit.classify(cubin) == "cubin"
        assert audit.inspect(cubin, "cubin", cubin.parent, "/nonexistent/cuobjdump").sass == {arch}


def test_files_without_device_code_are_not_binaries(tmp_path):
    host_only = tmp_path / "host.so"
    host_only.write_bytes(b"\x7fELF not really a library")
    python = Path(sys.executable).resolve()
    assert audit.classify(host_only) is None
    assert audit.classify(python) is None
    (tmp_path / "kernel.ptx").write_text(".version 8.7\n.target sm_120a\n.address_size 64\n")
    assert audit.inspect(tmp_path / "kernel.ptx", "ptx", tmp_path, CUOBJDUMP).ptx == {"sm_120a"}


# ---------------------------------------------------------------------------------------------- whole audit


def _run(tmp_path: Path, site: Path, required: Path) -> tuple[int, dict, str]:
    out = tmp_path / "audit.json"
    code = audit.main(
        ["--required", str(required), "--json", str(out), "--root", str(site), "--cuobjdump", CUOBJDUMP]
    )
    return code, json.loads(out.read_text()), str(out)


def test_report_per_package_and_required_entries_pass(built, tmp_path, capsys):
    site = _site(
        tmp_path / "site",
        {
            "torch": {"torch/lib/libtorch_cuda.so": built["fat.so"]},
            "sglang-kernel": {
                "sgl_kernel/sm100/common_ops.abi3.so": built["sm120a.so"],
                "sgl_kernel/flash_ops.abi3.so": built["sm90.so"],
            },
            "flashinfer-cubin": {
                "flashinfer_cubin/cubins/a.cubin": built["sm_100a.cubin"],
                "flashinfer_cubin/cubins/b.cubin": built["sm_100a.cubin"],
            },
        },
    )
    required = _required(
        tmp_path / "required.yaml",
        "  - {name: torch, package: torch, files: [torch/lib/libtorch_cuda.so], reason: every topology}\n"
        "  - {name: common_ops, package: sglang-kernel, files: ['sgl_kernel/sm100/common_ops.*.so'],"
        " reason: r}\n",
    )
    code, report, _ = _run(tmp_path, site, required)
    assert code == 0, capsys.readouterr().out
    assert report["schema"] == 1 and report["target_sm"] == 120 and report["ok"] is True
    torch = report["packages"]["torch"]
    assert torch["version"] == "1.0" and torch["files"] == 1
    assert torch["sass"] == ["sm_90", "sm_120"]
    assert torch["target"] == {"sass": 1, "ptx_jit": 0, "none": 0}
    kernels = {lib["path"]: lib for lib in report["packages"]["sglang-kernel"]["libraries"]}
    assert kernels["sgl_kernel/sm100/common_ops.abi3.so"]["target"] == "sass"
    assert kernels["sgl_kernel/flash_ops.abi3.so"] == {
        "path": "sgl_kernel/flash_ops.abi3.so",
        "kind": "shared-object",
        "sass": ["sm_90"],
        "ptx": [],
        "target": "none",
    }
    cubins = report["packages"]["flashinfer-cubin"]
    assert cubins["loose_cubins"] == {"sm_100a": 2} and cubins["libraries"] == []
    assert [entry["verdict"] for entry in report["required"]] == ["sass", "sass"]
    table = capsys.readouterr().out
    assert "torch" in table and "S1/P0/-0" in table and "kernel audit: ok" in table


def test_a_required_library_without_sm_120_fails_and_says_why(built, tmp_path, capsys):
    site = _site(tmp_path / "site", {"sglang-kernel": {"sgl_kernel/flash_ops.abi3.so": built["sm90.so"]}})
    required = _required(
        tmp_path / "required.yaml",
        "  - {name: fa3, package: sglang-kernel, files: ['sgl_kernel/flash_ops.*.so'],"
        " reason: a topology uses fa3}\n"
        "  - {name: absent, package: torch, files: [torch/lib/libtorch_cuda.so], reason: every topology}\n",
    )
    code, report, _ = _run(tmp_path, site, required)
    assert code == 1
    assert report["ok"] is False
    assert [(e["name"], e["verdict"], e["ok"]) for e in report["required"]] == [
        ("fa3", "none", False),
        ("absent", "missing", False),
    ]
    out = capsys.readouterr().out
    assert "FAIL none     fa3" in out and "needed because: a topology uses fa3" in out
    assert "kernel audit: FAILED" in out


def test_toolchain_probe_assembles_an_sm_120a_kernel_with_nvcc(tmp_path):
    result = audit.probe_assembler([NVCC], "sm_120a")
    assert result["accepts"] is True and result["produced"] == "sm_120a"
    missing = audit.probe_assembler([str(tmp_path / "ptxas")], "sm_120a")
    assert missing == {"path": str(tmp_path / "ptxas"), "present": False, "accepts": False}


def test_the_shipped_required_list_is_well_formed():
    spec = audit.load_required(REQUIRED_FILE)
    assert spec["target_sm"] == 120
    names = [entry["name"] for entry in spec["required"]]
    assert len(names) == len(set(names))
    assert {entry.get("toolchain") for entry in spec["required"]} >= {"nvcc", "triton-ptxas"}


def test_usage_errors_exit_64(tmp_path):
    assert audit.main([]) == 64
    assert (
        audit.main(
            ["--required", str(REQUIRED_FILE), "--json", str(tmp_path / "x.json"), "--cuobjdump", "/nope"]
        )
        == 64
    )
