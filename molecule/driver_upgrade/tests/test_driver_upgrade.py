"""What playbooks/driver-upgrade.yml must leave on a node (run against TEST FIXTURE stand-in packages):
converge moved 580 -> 590; side_effect tried 595, whose verification failed, and put 590 back."""

DRIVER_PACKAGES = ["nvidia-open", "nvidia-kernel-open-dkms", "nvidia-driver-cuda", "nvidia-persistenced"]


def test_driver_packages_are_back_on_the_previous_held_version(host):
    for name in DRIVER_PACKAGES:
        assert host.package(name).version == "590.44.01-1", name


def test_driver_packages_stay_held(host):
    held = host.check_output("apt-mark showhold").split()
    assert sorted(held) == sorted(DRIVER_PACKAGES)


def test_pin_keeps_apt_on_the_restored_version(host):
    pref = host.file("/etc/apt/preferences.d/nvidia-driver-sglnode.pref")
    assert pref.contains("^Pin: version 590.44.01-1$")
    policy = host.check_output("apt-cache policy nvidia-open")
    assert "Candidate: 590.44.01-1" in policy
    assert "595.12.01-1" in policy  # still offered: only the pin keeps apt off it


def test_upgrade_went_580_to_590_then_595_and_back(host):
    upgrades = host.check_output("grep -E ' (upgrade|downgrade) nvidia-open:' /var/log/dpkg.log")
    steps = [line.split()[-2:] for line in upgrades.splitlines()]
    assert steps == [
        ["580.95.05-1", "590.44.01-1"],
        ["590.44.01-1", "595.12.01-1"],
        ["595.12.01-1", "590.44.01-1"],
    ]


def test_gpu_checks_ran_on_the_upgraded_and_the_restored_driver(host):
    for check in ("sm120-probe", "image-smoke"):
        log = host.file(f"/var/log/fixture-{check}.log").content_string.splitlines()
        # converge, idempotence, and the restored 590 after the failed 595 (whose nvidia-smi failed first)
        assert [line.split(":")[0] for line in log] == ["driver 590.44.01-1"] * 3, log


def test_unattended_upgrades_guard_is_in_force(host):
    conf = host.file("/etc/apt/apt.conf.d/51nvidia-sglnode-no-unattended")
    for pattern in ("nvidia-", "libnvidia-", "cuda-"):
        assert conf.contains(f'"{pattern}";')
