"""What nvidia_driver must leave on a node (run against TEST FIXTURE stand-in packages)."""

DRIVER_PACKAGES = ["nvidia-open", "nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-persistenced"]


def test_existing_cuda_keyring_source_is_adopted_and_apt_updates(host):
    # prepare left cuda-keyring's source for the repository: the role adopts it and writes no second one
    # (cuda_toolkit's scenario covers the role's own source, written where none exists).
    assert not host.file("/etc/apt/sources.list.d/nvidia-cuda.sources").exists
    keyring = host.file("/etc/apt/sources.list.d/cuda-debian12-x86_64.list")
    assert keyring.contains("signed-by=/usr/share/keyrings/cuda-archive-keyring.gpg")
    update = host.run("apt-get update")
    assert update.rc == 0, update.stderr
    assert "Conflicting values set for option Signed-By" not in update.stdout + update.stderr


def test_driver_stays_on_the_pinned_branch_although_a_newer_one_is_offered(host):
    # The fixture repo also carries nvidia-open 590.x: only the pin keeps apt on the pinned branch
    # (the fixture repo's versions are test data: molecule/shared/files/build-fixture-apt-repo.sh).
    assert host.package("nvidia-open").version == "580.95.05-1"
    policy = host.check_output("apt-cache policy nvidia-open")
    assert "590.44.01-1" in policy
    assert "Candidate: 580.95.05-1" in policy


def test_driver_packages_are_held(host):
    held = host.check_output("apt-mark showhold").split()
    assert sorted(held) == sorted(DRIVER_PACKAGES)


def test_unattended_upgrades_blacklist_covers_nvidia_and_cuda(host):
    conf = host.file("/etc/apt/apt.conf.d/51nvidia-sglnode-no-unattended")
    for pattern in ("nvidia-", "libnvidia-", "cuda-"):
        assert conf.contains(f'"{pattern}";')
    dumped = host.check_output("apt-config dump Unattended-Upgrade::Package-Blacklist")
    assert '"libnvidia-"' in dumped


def test_nouveau_blacklisted_and_hmm_disabled(host):
    assert host.file("/etc/modprobe.d/blacklist-nouveau-sglnode.conf").contains("^blacklist nouveau$")
    assert host.file("/etc/modprobe.d/nvidia-sglnode.conf").contains("^options nvidia_uvm uvm_disable_hmm=1$")


def test_persistenced_enabled_and_running(host):
    service = host.service("nvidia-persistenced")
    assert service.is_enabled
    assert service.is_running


def test_initramfs_rebuilt_once_for_the_modprobe_files(host):
    # converge writes the modprobe files (handler runs); idempotence changes nothing (handler does not).
    calls = host.file("/var/log/fixture-update-initramfs.log").content_string.splitlines()
    assert calls == ["-u"]


def test_persistenced_runs_with_persistence_mode_on(host):
    # The packaged unit says --no-persistence-mode; the role's drop-in (as NVIDIA's own Ansible role
    # writes it) must start the daemon with --persistence-mode, and every GPU must report it.
    exec_start = host.check_output("systemctl show --property=ExecStart nvidia-persistenced")
    assert "--persistence-mode" in exec_start
    assert "--no-persistence-mode" not in exec_start
    started = host.file("/var/log/fixture-nvidia-persistenced.log").content_string.splitlines()
    assert "--persistence-mode" in started[-1].split()
    modes = host.check_output("nvidia-smi --query-gpu=persistence_mode --format=csv,noheader").splitlines()
    assert modes == ["Enabled"] * 8


def test_running_kernel_headers_installed_before_dkms_built_the_module(host):
    # With recommends off nothing pulls the headers in; without them DKMS only warns and builds nothing.
    kernel = host.check_output("uname -r")
    assert host.package(f"linux-headers-{kernel}").is_installed
    assert host.file(f"/var/lib/fixture-dkms/nvidia-{kernel}.built").exists
