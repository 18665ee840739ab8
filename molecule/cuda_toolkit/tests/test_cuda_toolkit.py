"""What cuda_toolkit must leave: real nvcc (host mount) plus TEST FIXTURE NCCL/cuDNN packages."""

import json

HELD = ["libnccl2", "libnccl-dev", "libcudnn9-cuda-13", "libcudnn9-dev-cuda-13"]


def test_nccl_and_cudnn_at_pinned_versions_and_held(host):
    assert host.package("libnccl2").version == "2.27.7-1+cuda13.0"
    assert host.package("libcudnn9-cuda-13").version == "9.13.0.50-1"
    assert sorted(host.check_output("apt-mark showhold").split()) == sorted(HELD)


def test_login_shell_finds_nvcc_13_0(host):
    out = host.check_output("bash -lc 'echo $CUDA_HOME; nvcc --version'")
    assert out.splitlines()[0] == "/usr/local/cuda-13.0"
    assert "release 13.0" in out


def test_linker_config_points_at_toolkit_libs(host):
    assert host.file("/etc/ld.so.conf.d/cuda-sglnode.conf").contains("^/usr/local/cuda-13.0/lib64$")
    assert "libcudart.so" in host.check_output("ldconfig -p")


def test_probe_cubin_is_sm_120a(host):
    cubin = "/var/lib/sglnode/cuda-probe/probe.cubin"
    report = json.loads(host.check_output(f"python3 /var/lib/sglnode/cuda-probe/cubin_arch.py {cubin}"))
    assert report == {"machine": 190, "sm": 120, "ptxas_arch": "sm_120a"}


def test_cuda_keyring_source_is_adopted_and_apt_updates(host):
    # side_effect installed cuda-keyring's source for the same repository: the role dropped its own.
    assert not host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").exists
    keyring = host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list")
    assert keyring.contains("signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg")
    update = host.run("apt-get update")
    assert update.rc == 0, update.stderr
    assert "Conflicting values set for option Signed-By" not in update.stdout + update.stderr
