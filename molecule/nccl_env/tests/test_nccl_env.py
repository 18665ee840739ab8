"""What nccl_env must leave on the node: one commented env file per server, 0640, NCCL's own choices."""

import pytest

DIRECTORY = "/etc/sglang/pd-1p1d"


def _env(host, server):
    text = host.file(f"{DIRECTORY}/{server}.env").content_string
    return text, dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


@pytest.mark.parametrize("server", ["prefill0", "decode0"])
def test_env_file_is_root_owned_and_not_world_readable(host, server):
    env_file = host.file(f"{DIRECTORY}/{server}.env")
    assert env_file.exists
    assert env_file.user == "root"
    assert env_file.mode == 0o640


def test_only_the_servers_of_the_topology_have_env_files(host):
    listed = host.run(f"ls {DIRECTORY}").stdout.split()
    assert sorted(listed) == ["decode0.env", "prefill0.env"]


def test_nccl_chooses_algorithm_and_protocol_with_the_p2p_off_fallback(host):
    _, env = _env(host, "prefill0")
    # pd-1p1d opts into no NCCL profile: NCCL picks algorithm and protocol per message size.
    assert "NCCL_ALGO" not in env and "NCCL_PROTO" not in env
    assert env["NCCL_IB_DISABLE"] == "1"
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert env["NCCL_P2P_DISABLE"] == "1"
    assert "NCCL_P2P_LEVEL" not in env
    # PD over NIXL: UCX transports are explicit; with P2P unsafe, no CUDA IPC either.
    assert env["UCX_TLS"].split(",")[0] == "cuda_copy" and "cuda_ipc" not in env["UCX_TLS"]


def test_topology_override_wins_and_every_line_has_its_reason(host):
    text, env = _env(host, "decode0")
    assert env["NCCL_DEBUG"] == "INFO"
    assert "# Set by the topology (nccl:); the default here is WARN." in text
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert lines[index - 1].startswith("# ")
