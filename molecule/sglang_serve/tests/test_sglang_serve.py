"""What sglang_serve must leave on the node: compose project, secrets, an enabled verified unit,
and the previous topology's unit disabled."""

import yaml

DIRECTORY = "/etc/sglang/pd-1p1d"
UNIT = "/etc/systemd/system/sglang-pd-1p1d.service"


def test_compose_files_are_world_readable_and_root_owned(host):
    for name in ("compose.yaml", "compose.sim.yaml"):
        compose = host.file(f"{DIRECTORY}/{name}")
        assert compose.user == "root"
        assert compose.mode == 0o644


def test_compose_publishes_only_on_the_inventory_address(host):
    services = yaml.safe_load(host.file(f"{DIRECTORY}/compose.yaml").content_string)["services"]
    assert set(services) == {"prefill0", "decode0", "router"}
    for service in services.values():
        for port in service.get("ports", []):
            assert port.startswith("127.0.0.1:")


def test_api_key_secrets_are_0600_and_referenced_not_inlined(host):
    for name in ("api-key.yaml", "api-key.env"):
        secret = host.file(f"{DIRECTORY}/{name}")
        assert secret.mode == 0o600
        assert "molecule-test-key" in secret.content_string
    # SGLang reads the config file as the image's user (UID 10002); compose reads the env file as root.
    assert host.file(f"{DIRECTORY}/api-key.yaml").uid == 10002
    assert host.file(f"{DIRECTORY}/api-key.env").uid == 0
    assert "molecule-test-key" not in host.file(f"{DIRECTORY}/compose.yaml").content_string


def test_unit_is_enabled_and_runs_the_compose_project(host):
    unit = host.file(UNIT)
    assert unit.mode == 0o644
    assert (
        "ExecStart=/usr/bin/docker compose --project-name sglang-pd-1p1d --file compose.yaml up"
        in unit.content_string
    )
    assert host.service("sglang-pd-1p1d.service").is_enabled


def test_unit_passes_systemd_analyze_verify(host):
    result = host.run(f"systemd-analyze verify {UNIT}")
    assert result.rc == 0
    assert result.stderr.strip() == ""


def test_previous_topology_was_stopped_and_disabled(host):
    previous = host.service("sglang-tp8.service")
    assert not previous.is_enabled
    assert not previous.is_running
