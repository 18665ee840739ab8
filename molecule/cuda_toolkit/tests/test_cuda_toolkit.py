"""What cuda_toolkit must leave: real nvcc (host mount) plus TEST FIXTURE NCCL/cuDNN packages."""

import json
import sys
from pathlib import Path

# This checkout's pins (tools/sglnode/pins.yaml), whichever sglnode the venv has installed.
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "tools"))
from sglnode.pins import PINS

HELD = ["libnccl2", "libnccl-dev", "libcudnn9-cuda-13", "libcudnn9-dev-cuda-13"]


def test_nccl_and_cudnn_at_pinned_versions_and_held(host):
    assert host.package("libnccl2").version == f"{PINS.nccl}+cuda{PINS.cuda}"
    assert host.package("libcudnn9-cuda-13").version == PINS.cudnn
    assert sorted(host.check_output("apt-mark showhold").split()) == sorted(HELD)


def test_login_shell_finds_nvcc_13_0(host):
    out = host.check_output("bash -lc 'echo $CUDA_HOME; nvcc --version'")
    assert out.splitlines()[0] == f"/usr/local/cuda-{PINS.cuda}"
    assert f"release {PINS.cuda}" in out


def test_linker_config_points_at_toolkit_libs(host):
    assert host.file("/etc/ld.so.conf.d/cuda-sglnode.conf").contains(f"^/usr/local/cuda-{PINS.cuda}/lib64$")
    assert "libcudart.so" in host.check_output("ldconfig -p")


def test_probe_cubin_is_the_gpus_arch_specific_target(host):
    cubin = "/var/lib/sglnode/cuda-probe/probe.cubin"
    report = json.loads(host.check_output(f"python3 /var/lib/sglnode/cuda-probe/cubin_arch.py {cubin}"))
    assert report == {"machine": 190, "sm": int(PINS.gpu.sm_number), "ptxas_arch": PINS.gpu.sm_arch_specific}


def test_cuda_keyring_source_is_adopted_and_apt_updates(host):
    # side_effect installed cuda-keyring's source for the same repository: the role dropped its own.
    assert not host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").exists
    keyring = host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list")
    assert keyring.contains("signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg")
    update = host.run("apt-get update")
    assert update.rc == 0, update.stderr
    assert "Conflicting values set for option Signed-By" not in update.stdout + update.stderr
