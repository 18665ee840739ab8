"""The tune scripts inside the real SGLang image, without a GPU: SGLang's own MoE config lookup for
the shipped presets (the coverage report CI prints), the MoE cache layout the tuning job writes, and
the all-reduce sweep's plumbing on gloo (2-3 CPU processes), parsed by sglnode."""

import json
import subprocess
from pathlib import Path

import pytest
from docker_available import built_sglang_image

from sglnode.tune import moe
from sglnode.tune.nccl import load_measurements, score_variants

REPO = Path(__file__).resolve().parents[2]
DEVICE = "NVIDIA_RTX_PRO_6000_Blackwell_Server_Edition"
RUN_TIMEOUT_S = 600

pytestmark = [pytest.mark.docker, pytest.mark.sglang_image, pytest.mark.slow]


@pytest.fixture(scope="module")
def image() -> str:
    return built_sglang_image()


def _shared_dir(path: Path) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o777)  # the image runs as UID 10002
    for parent in path.parents:
        if parent == Path("/tmp") or parent == Path("/"):
            break
        parent.chmod(parent.stat().st_mode | 0o005)
    return path


def test_coverage_of_the_shipped_presets_names_the_missing_configs(image):
    rows = moe.plan_rows(moe.moe_presets(), [1, 2, 4, 8], [1])
    report = moe.coverage(rows, image)
    print(moe.render_coverage(report))
    assert report["sglang"] == "0.5.23"
    assert report["device_name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    # What 0.5.23 ships for this GPU: two files, for another Triton than the image's.
    assert report["shipped_for_device"] == [
        f"triton_3_6_0/E=256,N=512,device_name={DEVICE}.json",
        f"triton_3_6_0/E=256,N=512,device_name={DEVICE}_down.json",
    ]
    by_id = {row["id"]: row for row in report["rows"]}
    v3 = by_id["deepseek-v3-fp8/tp8"]
    assert (v3["E"], v3["N"], v3["verdict"], v3["missing"]) == (257, 256, "default", True)
    # DeepSeek-V4's MXFP4 experts run on flashinfer_mxfp4: a Triton config does not matter there,
    # even where SGLang's lookup would fall back to the Triton 3.6.0 file (TP4: E=256, N=512).
    v4 = by_id["deepseek-v4-flash-fp4/tp4"]
    assert (v4["runner"], v4["verdict"], v4["missing"]) == ("flashinfer_mxfp4", "not_triton", False)
    assert v4["lookup"] == "fallback" and v4["lookup_triton"] == "3.6.0"
    assert report["missing"] == sorted(
        f"E=257,N={n},device_name={DEVICE},dtype=fp8_w8a8,block_shape=[128, 128].json"
        for n in (2048, 1024, 512, 256)
    )
    assert {job["N"] for job in report["tune_cases"]} == {2048, 1024, 512, 256}


def test_a_seeded_cache_with_a_tuned_file_is_what_sglang_reads_through_sglang_moe_config_dir(image, tmp_path):
    work = _shared_dir(tmp_path / "work")
    rows = [moe.expert_shape("deepseek-v3-fp8", 4), moe.expert_shape("deepseek-v3-fp8", 8)]
    cases = [job for job in moe.coverage(rows, image, probe=_offline_probe)["tune_cases"]]
    (work / "cases.json").write_text(json.dumps(cases))
    (work / "cases.json").chmod(0o644)
    target = f"/work/cache/configs/triton_3_8_0/{cases[0]['file_name']}"
    # The tuning job's dry run seeds the root with the wheel's configs; a stand-in for a tuned file
    # (the shipped TP4 BF16 table) is then placed where the job would write it.
    script = (
        "python3 /sglnode-inimage/moe_tune.py --cases /work/cases.json --cache-root /work/cache --dry-run"
        f" && cp '/work/cache/configs/triton_3_6_0/E=256,N=512,device_name={DEVICE}.json' '{target}'"
        " && chmod -R a+rX /work/cache"
    )
    result = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-e", "LD_LIBRARY_PATH=/opt/sglnode/no-gpu",
         "-v", f"{moe.inimage_dir()}:/sglnode-inimage:ro", "-v", f"{work}:/work", image, "sh", "-c", script],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    plan = json.loads(result.stdout.strip().splitlines()[-1])
    assert plan["seeded"] is True and plan["version_dir"] == "/work/cache/configs/triton_3_8_0"
    # The quick space: 3 x 2 x 2 x 1 x 2 x 2; every BLOCK_N and BLOCK_K divides the 128x128 blocks.
    assert [step["configs"] for step in plan["plan"]] == [48, 48]
    cache = work / "cache"
    assert (cache / "configs" / "triton_3_1_0").is_dir()  # every shipped Triton version came along
    report = moe.coverage(rows, image, config_dir=cache)
    by_id = {row["id"]: row for row in report["rows"]}
    assert report["config_dir_env"] == "/opt/sglnode/moe-configs"
    assert by_id["deepseek-v3-fp8/tp4"]["lookup"] == "exact"
    assert by_id["deepseek-v3-fp8/tp4"]["lookup_path"].startswith(
        "/opt/sglnode/moe-configs/configs/triton_3_8_0/"
    )
    assert report["missing"] == [cases[1]["file_name"]]


def _offline_probe(image, cases, device_name, config_dir):
    """Every case missing: enough to build the tuning jobs without running the image."""
    return {
        "sglang": "0.5.23", "triton": "3.8.0", "device_name": device_name, "config_root": "-",
        "shipped_for_device": [],
        "cases": [
            {
                "id": c["id"],
                "file_name": f"E={c['E']},N={c['N']},device_name={DEVICE},dtype={c['dtype']},"
                f"block_shape={c['block_shape']}.json",
                "up": {"class": "default"}, "down": {"class": "default"},
            }
            for c in cases
        ],
    }  # fmt: skip


def test_allreduce_sweep_plumbing_on_gloo_in_the_image(image, tmp_path):
    work = _shared_dir(tmp_path / "ar")
    variants = {"loopback": {"NCCL_PROTO": "LL"}, "broken": {"GLOO_SOCKET_IFNAME": "nonexistent0"}}
    (work / "variants.json").write_text(json.dumps(variants))
    (work / "variants.json").chmod(0o644)
    result = subprocess.run(
        ["docker", "run", "--rm", "--network", "none", "-e", "LD_LIBRARY_PATH=/opt/sglnode/no-gpu",
         "-v", f"{moe.inimage_dir()}:/sglnode-inimage:ro", "-v", f"{work}:/work", image,
         "python3", "/sglnode-inimage/allreduce_sweep.py", "--backend", "gloo",
         "--variants", "/work/variants.json",
         "--groups", "0-2", "--sizes", "1024,8192,65536", "--max-iters", "10", "--timeout-s", "240",
         "--out", "/work/allreduce.json"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT_S, check=False,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]  # one variant failed, by design
    measurements = load_measurements(work / "allreduce.json")
    assert measurements.backend == "gloo" and measurements.plumbing_only
    runs = {run.variant: run for run in measurements.runs}
    assert runs["loopback"].ok and runs["loopback"].world_size == 3
    assert [p.bytes for p in runs["loopback"].sizes] == [1024, 8192, 65536]
    assert all(p.us_p50 > 0 for p in runs["loopback"].sizes)
    assert not runs["broken"].ok and "nonexistent0" in runs["broken"].error
    scores = score_variants(measurements, 3, [1024, 65536])
    assert [(s.variant, s.ok) for s in scores] == [("loopback", True), ("broken", False)]
