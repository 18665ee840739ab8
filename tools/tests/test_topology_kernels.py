"""The sm_120 kernel check: backend choices against the image's kernel audit, and the map against the wheel.

kernels.yaml says what SGLang 0.5.23 loads for each choice; the audit (kernel-audit.json, the image's
own /opt/sglnode/kernel-audit.json: test_upstream_oracle.py holds the shipped copy to the built image)
says which of those binaries run on sm_120. Here: refusals carry the audit's evidence, an audit that
changes changes the verdict, and every source, refusal message and choice in the map is the pinned
wheel's own.
"""

import copy
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sglnode.topology import check_topology, read_topology_file
from sglnode.topology.flags import load_catalog
from sglnode.topology.kernels import KernelAudit, check_kernels, load_audit, load_kernel_map
from sglnode.upstream.wheels import WheelSource, pinned_wheel

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "inventory" / "topologies"
SHIPPED = sorted(TOPOLOGIES.glob("*.yml"))
FIELD_FLAGS = {
    "attention_backend": "--attention-backend",
    "moe_runner_backend": "--moe-runner-backend",
    "quantization": "--quantization",
    "fp8_gemm_backend": "--fp8-gemm-backend",
    "fp4_gemm_backend": "--fp4-gemm-backend",
    "transfer_backend": "--disaggregation-transfer-backend",
}


def _topology(name: str, **server_fields):
    data = read_topology_file(TOPOLOGIES / f"{name}.yml")
    for server in data["servers"]:
        server.update(copy.deepcopy(server_fields))
    topology, problems = check_topology(data)
    assert problems == []
    return topology


def _sglnode(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "sglnode", *args], capture_output=True, text=True, timeout=120, check=False
    )


def _audit_with(change) -> KernelAudit:
    raw = json.loads(Path(load_audit().source).read_text(encoding="utf-8"))
    change(raw)
    return KernelAudit(
        source="edited audit",
        target_sm=raw["target_sm"],
        packages=raw["packages"],
        jit_packages=raw["jit_packages"],
        toolchains=raw["toolchains"],
        distributions=raw.get("distributions") or {},
    )


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_topologies_only_choose_kernels_that_run_on_sm120(path):
    topology, problems = check_topology(read_topology_file(path))
    assert problems == []
    findings, kernel_problems = check_kernels(topology, load_audit())
    assert kernel_problems == []
    # What SGLang picks by itself on sm_120 is named too, not just what the file sets.
    assert any(f.auto and f.field == "attention_backend" for f in findings)


def test_fa3_is_refused_with_sglangs_message_and_the_audits_archs(tmp_path):
    data = read_topology_file(TOPOLOGIES / "tp8.yml")
    data["servers"][0]["attention_backend"] = "fa3"
    path = tmp_path / "fa3.yml"
    path.write_text(json.dumps(data), encoding="utf-8")
    done = _sglnode("topology", "check", str(path))
    assert done.returncode == 1, done.stdout + done.stderr
    assert "attention_backend: fa3" in done.stdout
    assert "FlashAttention v3 Backend requires SM>=80 and SM<=90" in done.stdout
    # The audit's evidence: the library and the archs it does carry.
    flash_ops = next(
        lib for lib in load_audit().packages["sglang-kernel"]["libraries"] if "flash_ops" in lib["path"]
    )
    assert flash_ops["target"] == "none" and "sm_120" not in " ".join(flash_ops["sass"])
    assert flash_ops["path"] in done.stdout
    assert ", ".join(flash_ops["sass"]) in done.stdout
    assert "runs here: flashinfer, triton" in done.stdout
    assert "Traceback" not in done.stderr


def test_a_library_without_sm120_code_is_refused_even_where_sglang_does_not_check():
    findings, problems = check_kernels(_topology("tp8", attention_backend="flashmla"), load_audit())
    (problem,) = problems
    assert "sgl-flash-mla" in problem.message and "no sm_120 SASS or PTX" in problem.message
    assert [f.verdict for f in findings if f.choice == "flashmla"] == ["no_kernels"]


def test_the_verdict_follows_the_audit_not_the_map():
    topology = _topology("pd-1p1d")
    assert check_kernels(topology, load_audit())[1] == []

    def strip_sm120_from_nixl(raw):
        for lib in raw["packages"]["nixl-cu13"]["libraries"]:
            lib["sass"] = [arch for arch in lib["sass"] if arch != "sm_120"]
            lib["target"] = "none"

    problems = check_kernels(topology, _audit_with(strip_sm120_from_nixl))[1]
    assert problems and all("nixl" in p.message for p in problems)

    def nvcc_cannot_build_sm120(raw):
        raw["toolchains"]["nvcc"]["accepts"] = False
        raw["toolchains"]["nvcc"]["error"] = "nvcc fatal: Unsupported gpu architecture 'compute_120a'"

    problems = check_kernels(topology, _audit_with(nvcc_cannot_build_sm120))[1]
    assert problems and all("Unsupported gpu architecture" in p.message for p in problems)


def test_ptx_the_driver_can_jit_counts_as_runnable():
    topology = _topology("tp8", attention_backend="flashmla")

    def flash_mla_ships_ptx(raw):
        for lib in raw["packages"]["sgl-flash-mla"]["libraries"]:
            lib["ptx"], lib["target"] = ["compute_120"], "ptx-jit"

    assert check_kernels(topology, _audit_with(flash_mla_ships_ptx))[1] == []


def test_sglangs_own_pick_is_checked_and_named_as_its_pick():
    # No attention_backend in the file: DeepSeek-V4 gets dsv4 from SGLang itself on sm_120.
    findings, _ = check_kernels(_topology("tp8"), load_audit())
    (attention,) = [f for f in findings if f.field == "attention_backend"]
    assert (attention.choice, attention.auto, attention.verdict) == ("dsv4", True, "runs")


def test_pd_without_a_transfer_backend_is_checked_on_sglangs_default():
    data = read_topology_file(TOPOLOGIES / "pd-1p1d.yml")
    for section in (data.get("server_defaults") or {}, *data["servers"]):
        section.pop("transfer_backend", None)
    topology, problems = check_topology(data)
    assert problems == []
    findings, problems = check_kernels(topology, load_audit())
    transfer = {f.choice for f in findings if f.field == "transfer_backend"}
    assert transfer == {load_catalog().defaults["disaggregation_transfer_backend"]} == {"mooncake"}
    assert all(f.auto for f in findings if f.field == "transfer_backend")
    # The image installs Mooncake only with ENABLE_MOONCAKE=1: SGLang's default would fail at start.
    assert "mooncake" not in " ".join(load_audit().distributions).lower()
    assert problems and all("mooncake-transfer-engine" in p.message for p in problems)

    def built_with_mooncake(raw):
        raw["distributions"]["mooncake-transfer-engine-cuda13"] = "0.3.14"

    assert check_kernels(topology, _audit_with(built_with_mooncake))[1] == []


def test_other_platforms_backends_are_refused_by_name():
    problems = check_kernels(_topology("tp8", attention_backend="aiter"), load_audit())[1]
    assert problems and "ROCm" in problems[0].message


def test_every_mapped_choice_is_one_sglang_0_5_23_accepts():
    catalog = load_catalog()
    for field, choices in load_kernel_map().items():
        if field == "speculative_algorithm":
            assert set(choices) <= set(catalog.speculative_algorithms), field
            continue
        accepted = set(catalog.choices(FIELD_FLAGS[field])) | {"auto"}
        assert set(choices) <= accepted, (field, sorted(set(choices) - accepted))


def test_every_source_and_refusal_in_the_map_is_in_the_pinned_wheel():
    with WheelSource(pinned_wheel("sglang")) as wheel:
        names = set(wheel.names())
        for field, choices in load_kernel_map().items():
            for choice, entry in choices.items():
                for part in re.split(r";\s*", entry["source"]):
                    path, _, line = part.split(" ")[0].partition(":")
                    assert path in names, (field, choice, path)
                    if line:
                        first = int(line.split("-")[0].split(",")[0])
                        assert first <= wheel.read(path).count("\n") + 1, (field, choice, part)
                refused = entry.get("refused")
                if refused:
                    path = refused["source"].split(":")[0]
                    text = " ".join(wheel.read(path).split())
                    # The message's opening words as SGLang writes them (f-strings may split the rest).
                    opening = " ".join(refused["message"].split()[:5])
                    assert opening in text, (field, choice, opening)


@pytest.mark.parametrize(
    "content",
    [
        b"\x00\xff binary",
        b"[1, 2]",
        b'{"packages": {}, "target_sm": "120"}',
        b'{"target_sm": 120, "packages": []}',
    ],
)
def test_a_file_that_is_not_a_kernel_audit_is_refused_with_a_message(tmp_path, content):
    path = tmp_path / "audit.json"
    path.write_bytes(content)
    done = _sglnode("topology", "check", str(TOPOLOGIES / "tp8.yml"), "--kernel-audit", str(path))
    assert done.returncode == 2 and "kernel audit" in done.stderr and "Traceback" not in done.stderr
