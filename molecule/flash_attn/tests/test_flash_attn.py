"""What flash_attn must leave (the build command is a TEST FIXTURE stand-in, see prepare.yml)."""

import json
import sys
from pathlib import Path

# This checkout's pins (tools/sglnode/pins.yaml), whichever sglnode the venv has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
from sglnode.pins import PINS

KEY = f"fa{PINS.flash_attn}-torch{PINS.torch}-{PINS.cuda_tag}-cp311-sm{PINS.gpu.sm_number}"
WHEEL = f"flash_attn-{PINS.flash_attn}-cp311-cp311-linux_x86_64.whl"
WHEELHOUSE = "/var/lib/sglnode/wheelhouse"
GB_PER_JOB = 6  # role default flash_attn_gb_per_job
RESERVE_GB = 8  # role default flash_attn_ram_reserve_gb
NODE_RAM_GB = 32  # gpu_node.ram_gb set in converge.yml


def expected_max_jobs(host):
    fit = (NODE_RAM_GB - RESERVE_GB) // GB_PER_JOB
    return max(min(fit, int(host.check_output("nproc"))), 1)


def test_wheel_is_stored_under_its_key(host):
    wheel = host.file(f"{WHEELHOUSE}/{KEY}/{WHEEL}")
    assert wheel.is_file
    assert host.file(f"{WHEELHOUSE}/flash-attn-current").linked_to == f"{WHEELHOUSE}/{KEY}"


def test_second_run_built_nothing(host):
    builds = host.file("/var/log/fixture-flash-attn-builds.log").content_string.splitlines()
    assert len(builds) == 1


def test_build_got_the_gpus_arch_and_ram_derived_max_jobs(host):
    build = host.file("/var/log/fixture-flash-attn-builds.log").content_string
    assert f"MAX_JOBS={expected_max_jobs(host)} " in build
    assert f"FLASH_ATTN_CUDA_ARCHS={PINS.gpu.sm_number} " in build
    assert "NVCC_THREADS=2 " in build
    assert "FLASH_ATTENTION_FORCE_BUILD=TRUE" in build
    assert "CCACHE_DIR=/var/cache/sglnode/ccache" in build


def test_build_record_names_the_key_parts(host):
    info = json.loads(host.file(f"{WHEELHOUSE}/{KEY}/BUILD-INFO.json").content_string)
    assert info["key"] == KEY
    assert info["cuda_archs"] == PINS.gpu.sm_number
    assert info["max_jobs"] == expected_max_jobs(host)
    assert host.package("ccache").is_installed
