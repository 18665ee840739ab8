"""What container_runtime must leave (TEST FIXTURE docker-ce and nvidia-ctk stand-ins)."""

import json

CTK_LOG = "/var/log/fixture-nvidia-ctk.log"
BUILDX_PLUGIN = "/usr/libexec/docker/cli-plugins/docker-buildx"
DOCKER_PACKAGES = (
    "docker-ce",
    "docker-ce-cli",
    "containerd.io",
    "docker-compose-plugin",
    "docker-buildx-plugin",
)


def test_docker_repo_signed_and_packages_installed(host):
    assert host.file("/etc/apt/sources.list.d/docker.sources").contains(
        "^Signed-By: /etc/apt/keyrings/docker.asc$"
    )
    for name in DOCKER_PACKAGES:
        assert host.package(name).is_installed


def test_buildx_plugin_is_where_the_docker_cli_looks_for_it(host):
    plugin = host.file(BUILDX_PLUGIN)
    assert plugin.is_file and plugin.mode & 0o111
    assert "Version" in host.check_output(f"{BUILDX_PLUGIN} docker-cli-plugin-metadata")


def test_docker_enabled_and_running(host):
    docker = host.service("docker")
    assert docker.is_enabled
    assert docker.is_running


def test_daemon_json_has_data_and_nvidia_runtime(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert config["log-driver"] == "json-file"
    assert config["log-opts"] == {"max-size": "100m", "max-file": "5"}
    assert config["live-restore"] is True
    assert config["data-root"] == "/var/lib/docker"
    assert config["runtimes"]["nvidia"]["path"] == "nvidia-container-runtime"


def test_nvidia_toolkit_pinned_and_held(host):
    assert host.package("nvidia-container-toolkit").version == "1.18.0-1"
    held = host.check_output("apt-mark showhold").split()
    assert "nvidia-container-toolkit" in held
    assert "libnvidia-container1" in held


def test_runtime_configured_once_and_cdi_regenerated_only_on_driver_change(host):
    calls = host.file(CTK_LOG).content_string.splitlines()
    # converge: configure + generate; idempotence: nothing; side_effect (new driver): generate.
    assert sum(c.startswith("runtime configure") for c in calls) == 1
    assert sum(c.startswith("cdi generate") for c in calls) == 2


def test_cdi_spec_and_stamp_follow_the_driver(host):
    assert host.file("/etc/cdi/nvidia.yaml").contains("TEST FIXTURE")
    assert host.file("/var/lib/sglnode/cdi-nvidia-driver-version").content_string.strip() == "580.105.08"
