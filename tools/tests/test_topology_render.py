"""The renderer: every file the roles write, from the topology alone, byte-stable."""

import copy
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from sglnode.pins import PINS
from sglnode.topology import RenderOptions, check_topology, read_topology_file, render
from sglnode.topology.render import JIT_CACHE_PATH

REPO = Path(__file__).resolve().parents[2]
TOPOLOGIES = REPO / "inventory" / "topologies"
SHIPPED = sorted(TOPOLOGIES.glob("*.yml"))


def rendered(name, **options):
    topology, problems = check_topology(read_topology_file(TOPOLOGIES / f"{name}.yml"))
    assert problems == []
    return {f.path: f for f in render(topology, RenderOptions(**options))}


def env_lines(text):
    return dict(line.split("=", 1) for line in text.splitlines() if line and not line.startswith("#"))


def compose(files, name="compose.yaml"):
    return yaml.safe_load(next(f.content for p, f in files.items() if p.endswith("/" + name)))


def test_pd_renders_env_files_compose_and_unit_with_modes():
    files = rendered("pd-1p1d")
    assert {p: (f.mode, f.kind) for p, f in files.items()} == {
        "etc/sglang/pd-1p1d/prefill0.env": ("0640", "nccl_env"),
        "etc/sglang/pd-1p1d/decode0.env": ("0640", "nccl_env"),
        "etc/sglang/pd-1p1d/compose.yaml": ("0644", "compose"),
        "etc/sglang/pd-1p1d/compose.sim.yaml": ("0644", "compose"),
        "etc/systemd/system/sglang-pd-1p1d.service": ("0644", "unit"),
    }


def test_env_file_leaves_algorithm_protocol_and_p2p_level_to_nccl_by_default():
    # Issue 13: NCCL's docs file NCCL_ALGO/NCCL_PROTO under "Debugging"; forcing them froze NCCL's
    # per-size choice (LL halves the bandwidth of prefill-size all-reduces).
    text = rendered("tp8")["etc/sglang/tp8/tp8.env"].content
    assert env_lines(text) == {
        "NCCL_IB_DISABLE": "1",
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "NCCL_CUMEM_ENABLE": "0",
        "NCCL_DEBUG": "WARN",
    }
    lines = text.splitlines()
    for index, line in enumerate(lines):
        if line and not line.startswith("#"):
            assert lines[index - 1].startswith("# "), f"no why-comment above {line}"


def test_field_pcie_block_is_a_profile_a_topology_opts_into():
    data = read_topology_file(TOPOLOGIES / "tp8.yml")
    data["nccl_profile"] = "field-pcie-block"
    topology, problems = check_topology(data)
    assert problems == []
    text = next(f.content for f in render(topology) if f.path.endswith("tp8.env"))
    env = env_lines(text)
    assert {k: env[k] for k in ("NCCL_ALGO", "NCCL_PROTO", "NCCL_P2P_LEVEL")} == {
        "NCCL_ALGO": "Ring",
        "NCCL_PROTO": "LL",
        "NCCL_P2P_LEVEL": "SYS",
    }
    assert env["NCCL_MIN_NCHANNELS"] == "4" and env["NCCL_MAX_NCHANNELS"] == "16"
    assert "# field-pcie-block: decode all-reduces are small" in text


def test_one_server_can_opt_into_a_profile_and_a_misspelled_profile_is_refused():
    data = read_topology_file(TOPOLOGIES / "pd-1p1d.yml")
    data["servers"][1]["nccl_profile"] = "field-pcie-block"
    topology, problems = check_topology(data)
    assert problems == []
    files = {f.path: f.content for f in render(topology)}
    assert env_lines(files["etc/sglang/pd-1p1d/decode0.env"])["NCCL_PROTO"] == "LL"
    assert "NCCL_PROTO" not in env_lines(files["etc/sglang/pd-1p1d/prefill0.env"])
    data["nccl_profile"] = "field-pcie-blok"
    problems = check_topology(data)[1]
    assert [str(p) for p in problems] == [
        "topology.nccl_profile: 'field-pcie-blok' is not an NCCL profile of sglnode/topology/nccl.yaml; "
        "did you mean 'field-pcie-block'?"
    ]


def test_p2p_level_follows_what_preflight_read_not_a_blanket_sys():
    env = env_lines(rendered("tp8", p2p_level="PHB")["etc/sglang/tp8/tp8.env"].content)
    assert env["NCCL_P2P_LEVEL"] == "PHB"
    data = read_topology_file(TOPOLOGIES / "tp8.yml")
    data["nccl_profile"] = "field-pcie-block"
    topology, _ = check_topology(data)
    text = next(f.content for f in render(topology, RenderOptions(p2p_level="PXB")) if f.kind == "nccl_env")
    assert env_lines(text)["NCCL_P2P_LEVEL"] == "PXB"  # measured beats the profile's SYS
    with pytest.raises(ValueError, match="p2p_level 'FAST' is not one of LOC, NVL, PIX, PXB, PHB, SYS"):
        RenderOptions(p2p_level="FAST")


def test_pd_servers_get_the_ucx_transports_for_cuda_ipc_kv_transfer():
    files = rendered("pd-1p1d")
    for server in ("prefill0", "decode0"):
        text = files[f"etc/sglang/pd-1p1d/{server}.env"].content
        transports = env_lines(text)["UCX_TLS"].split(",")
        assert transports[:2] == ["cuda_ipc", "cuda_copy"] and "tcp" in transports
        assert "# KV transfer (NIXL on UCX): cuda_ipc copies GPU to GPU" in text
    assert "UCX_TLS" not in env_lines(rendered("tp8")["etc/sglang/tp8/tp8.env"].content)
    unsafe = env_lines(rendered("pd-1p1d", p2p_safe=False)["etc/sglang/pd-1p1d/decode0.env"].content)
    assert "cuda_ipc" not in unsafe["UCX_TLS"].split(",")  # ACS/IOMMU: no peer-to-peer of any kind
    ib = env_lines(rendered("pd-1p1d", infiniband=True)["etc/sglang/pd-1p1d/decode0.env"].content)
    assert "rc" in ib["UCX_TLS"].split(",")


def test_pd_containers_see_every_gpu_and_pick_theirs_by_base_gpu_id():
    services = compose(rendered("pd-1p1d"))["services"]
    for name, base in (("prefill0", "0"), ("decode0", "4")):
        service = services[name]
        devices = service["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"]
        assert devices == [str(g) for g in range(8)]  # CUDA IPC reaches the other side's GPUs
        assert service["ipc"] == "host"  # CUDA IPC handles need one IPC namespace
        command = service["command"]
        assert command[command.index("--base-gpu-id") + 1] == base
        assert command[command.index("--gpu-id-step") + 1] == "1"
    replicas = compose(rendered("tp4x2"))["services"]
    assert replicas["replica1"]["deploy"]["resources"]["reservations"]["devices"][0]["device_ids"] == [
        "4",
        "5",
        "6",
        "7",
    ]
    assert "--base-gpu-id" not in replicas["replica1"]["command"]


def test_pd_gpus_that_base_and_step_cannot_name_are_refused_and_args_cannot_set_them():
    data = read_topology_file(TOPOLOGIES / "pd-1p1d.yml")
    data["servers"][1]["gpus"] = [4, 5, 7, 6]
    data["servers"][0]["args"] = {"gpu_id_step": 2}
    wheres = {str(p) for p in check_topology(data)[1]}
    assert any(w.startswith("server decode0.gpus: [4, 5, 7, 6]: a PD server's container") for w in wheres)
    assert (
        "server prefill0.args.gpu_id_step: --gpu-id-step comes from the topology field gpus (step)" in wheres
    )
    data["servers"][1]["gpus"] = [4, 6]
    data["servers"][1]["tp"] = 2
    topology, problems = check_topology(
        data | {"servers": [data["servers"][0] | {"args": {}}, data["servers"][1]]}
    )
    assert problems == []
    command = yaml.safe_load(render(topology)[2].content)["services"]["decode0"]["command"]
    assert command[command.index("--gpu-id-step") + 1] == "2"


def test_p2p_unsafe_node_gets_p2p_disable_and_no_custom_all_reduce():
    files = rendered("pd-1p1d", p2p_safe=False)
    env = env_lines(files["etc/sglang/pd-1p1d/decode0.env"].content)
    assert env["NCCL_P2P_DISABLE"] == "1"
    assert "NCCL_P2P_LEVEL" not in env
    for service in ("prefill0", "decode0"):
        assert "--disable-custom-all-reduce" in compose(files)["services"][service]["command"]
    safe = compose(rendered("pd-1p1d"))
    assert "--disable-custom-all-reduce" not in safe["services"]["prefill0"]["command"]


def test_infiniband_node_keeps_ib_enabled():
    env = env_lines(rendered("tp8", infiniband=True)["etc/sglang/tp8/tp8.env"].content)
    assert "NCCL_IB_DISABLE" not in env


def test_topology_then_server_overrides_win_and_say_so():
    data = read_topology_file(TOPOLOGIES / "pd-1p1d.yml")
    data["nccl"] = {"NCCL_DEBUG": "INFO", "NCCL_PROTO": "Simple"}
    data["servers"][0]["nccl"] = {"NCCL_PROTO": "LL128"}
    topology, problems = check_topology(data)
    assert problems == []
    files = {f.path: f.content for f in render(topology)}
    prefill = files["etc/sglang/pd-1p1d/prefill0.env"]
    assert env_lines(prefill)["NCCL_PROTO"] == "LL128"
    assert env_lines(prefill)["NCCL_DEBUG"] == "INFO"
    assert "# Set by the server prefill0 (nccl:); the default here is" in prefill
    assert env_lines(files["etc/sglang/pd-1p1d/decode0.env"])["NCCL_PROTO"] == "Simple"


def test_compose_pins_gpus_binds_ports_to_the_bind_address_and_mounts_model_read_only():
    services = compose(rendered("pd-1p1d", bind_address="10.1.2.3"))["services"]
    prefill = services["prefill0"]
    assert prefill["command"][prefill["command"].index("--base-gpu-id") + 1] == "0"
    assert prefill["ports"] == ["10.1.2.3:30001:30001"]
    router, prometheus = PINS.ports.router, PINS.ports.router_prometheus  # pd-1p1d takes the defaults
    assert services["router"]["ports"] == [
        f"10.1.2.3:{router}:{router}",
        f"10.1.2.3:{prometheus}:{prometheus}",
    ]
    assert prefill["volumes"][0] == "/srv/models/DeepSeek-V4-Flash:/models/DeepSeek-V4-Flash:ro"
    assert prefill["ipc"] == "host" and prefill["init"] is True
    assert prefill["ulimits"]["memlock"] == {"soft": -1, "hard": -1}
    assert prefill["healthcheck"]["start_period"] == "1800s"
    assert "/health" in prefill["healthcheck"]["test"][-1]
    assert prefill["env_file"] == ["./prefill0.env"]


def test_jit_caches_persist_in_one_volume_per_image():
    document = compose(rendered("pd-1p1d"))
    for name in ("prefill0", "decode0"):
        assert "sglang-jit:/var/cache/sglang-jit" in document["services"][name]["volumes"]
    assert "volumes" not in document["services"]["router"]
    volume = document["volumes"]["sglang-jit"]["name"]
    assert volume == "sglang-jit-" + PINS.sglang_image.replace(":", "-")
    # Another image (new lock, new torch) never loads the old image's compiled modules.
    other = compose(rendered("pd-1p1d", sglang_image=f"{PINS.sglang_image}-abc123"))
    assert other["volumes"]["sglang-jit"]["name"] != volume


def test_jit_cache_path_is_the_one_the_image_sets():
    dockerfile = (REPO / "images" / "sglang" / "Dockerfile").read_text(encoding="utf-8")
    assert f"SGLNODE_JIT_CACHE={JIT_CACHE_PATH}" in dockerfile
    for variable in (
        "TRITON_CACHE_DIR",
        "FLASHINFER_WORKSPACE_BASE",
        "TORCHINDUCTOR_CACHE_DIR",
        "TORCH_EXTENSIONS_DIR",
    ):
        assert f"{variable}={JIT_CACHE_PATH}/" in dockerfile, variable


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_no_port_is_ever_published_on_all_interfaces(path):
    topology, _ = check_topology(read_topology_file(path))
    for node in topology.node_names:
        for f in render(topology, RenderOptions(node=node)):
            if f.path.endswith("compose.yaml"):
                for service in yaml.safe_load(f.content)["services"].values():
                    for port in service.get("ports", []):
                        assert port.startswith("127.0.0.1:"), port


def test_pd_router_is_the_real_router_in_pd_mode_with_bootstrap_port():
    command = compose(rendered("pd-1p1d"))["services"]["router"]["command"]
    assert command[:3] == ["python3", "-m", "sglang_router.launch_router"]
    joined = " ".join(command)
    bootstrap = PINS.ports.bootstrap
    assert (
        f"--pd-disaggregation --prefill http://prefill0:30001 {bootstrap} --decode http://decode0:30002"
        in joined
    )
    assert f"--prometheus-port {PINS.ports.router_prometheus}" in joined and "--policy cache_aware" in joined


def test_replicas_router_uses_worker_urls():
    command = compose(rendered("tp4x2"))["services"]["router"]["command"]
    start = command.index("--worker-urls")
    assert command[start + 1 : start + 3] == ["http://replica0:30001", "http://replica1:30002"]
    assert "--pd-disaggregation" not in command


def test_sglang_command_uses_0523_flags_for_fields():
    command = compose(rendered("tp8"))["services"]["tp8"]["command"]
    assert command[:3] == ["python3", "-m", "sglang.launch_server"]
    assert command[command.index("--cuda-graph-max-bs-decode") + 1] == "128"
    assert "--cuda-graph-max-bs" not in command
    assert command[command.index("--tp-size") + 1] == "8"
    mtp = compose(rendered("tp4-mtp"))["services"]["mtp0"]["command"]
    assert " ".join(mtp).count("--speculative-") == 4
    # The pinned SGLang runs DeepSeek-V4's MTP heads as EAGLE (it refuses NEXTN for this model).
    assert mtp[mtp.index("--speculative-algorithm") + 1] == "EAGLE"


def test_multinode_renders_each_rank_with_dist_init_and_host_network():
    node_a = compose(rendered("multinode-pd", node="node-a", bind_address="10.0.0.11"))["services"]
    node_b = compose(rendered("multinode-pd", node="node-b", bind_address="10.0.0.12"))["services"]
    assert set(node_a) == {"prefill0", "decode0", "router"}
    assert set(node_b) == {"prefill0", "decode0"}
    for services, rank in ((node_a, "0"), (node_b, "1")):
        command = services["prefill0"]["command"]
        assert command[command.index("--dist-init-addr") + 1] == "10.0.0.11:20000"
        assert command[command.index("--nnodes") + 1] == "2"
        assert command[command.index("--node-rank") + 1] == rank
        assert services["prefill0"]["network_mode"] == "host"
        assert "ports" not in services["prefill0"]
    assert "healthcheck" in node_a["prefill0"] and "healthcheck" not in node_b["prefill0"]
    assert f"--prefill http://10.0.0.11:30001 {PINS.ports.bootstrap}" in " ".join(node_a["router"]["command"])


def test_sim_override_swaps_image_and_entrypoint_and_resets_gpus():
    text = rendered("pd-1p1d")["etc/sglang/pd-1p1d/compose.sim.yaml"].content
    assert "deploy: !reset {}" in text and "volumes: !reset []" in text
    override = yaml.load(text, Loader=_ResetLoader)
    prefill = override["services"]["prefill0"]
    assert prefill["entrypoint"] == ["sglnode", "sim"]
    assert prefill["image"].startswith("sglnode/sim:")
    assert prefill["environment"] == {
        "SGLNODE_SIM_GPU": "rtx-pro-6000-blackwell",
        "SGLNODE_SIM_MODEL": "deepseek-v4-flash-fp4",
    }
    assert "router" not in override["services"]


class _ResetLoader(yaml.SafeLoader):
    pass


_ResetLoader.add_constructor("!reset", lambda loader, node: None)


def test_api_key_comes_from_secret_files_never_from_rendered_text():
    files = rendered("pd-1p1d", api_key=True)
    services = compose(files)["services"]
    command = services["prefill0"]["command"]
    assert command[command.index("--config") + 1] == "/run/sglang/api-key.yaml"
    assert "--api-key" not in command
    assert "./api-key.yaml:/run/sglang/api-key.yaml:ro" in services["prefill0"]["volumes"]
    assert services["router"]["env_file"] == ["./api-key.env"]
    assert "$$SGLANG_API_KEY" in services["router"]["entrypoint"][2]


def test_unit_runs_compose_for_the_project_and_adds_the_sim_override_for_sim():
    real = rendered("tp4x2")["etc/systemd/system/sglang-tp4x2.service"].content
    assert "ExecStart=/usr/bin/docker compose --project-name sglang-tp4x2 --file compose.yaml up" in real
    assert "ExecStop=/usr/bin/docker compose --project-name sglang-tp4x2 --file compose.yaml down" in real
    assert "WantedBy=multi-user.target" in real
    sim = rendered("tp4x2", runtime="sim", prefix="/srv/sim")[
        "etc/systemd/system/sglang-tp4x2.service"
    ].content
    assert "--file compose.yaml --file compose.sim.yaml up" in sim
    assert "WorkingDirectory=/srv/sim/etc/sglang/tp4x2" in sim


def test_render_is_deterministic():
    first = rendered("multinode-pd")
    second = rendered("multinode-pd")
    assert [f.to_json() for f in first.values()] == [f.to_json() for f in second.values()]


def test_args_render_sorted_switches_bare_and_false_left_out():
    data = read_topology_file(TOPOLOGIES / "tp8.yml")
    data["servers"][0]["args"] = {"log_level": "info", "enable_metrics": True, "disable_radix_cache": False}
    topology, problems = check_topology(copy.deepcopy(data))
    assert problems == []
    command = yaml.safe_load(render(topology)[1].content)["services"]["tp8"]["command"]
    assert command[-3:] == ["--enable-metrics", "--log-level", "info"]


SYSTEMD_ANALYZE = shutil.which("systemd-analyze")


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed")
@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_units_pass_systemd_analyze_verify(path, tmp_path):
    topology, _ = check_topology(read_topology_file(path))
    docker = shutil.which("docker") or "/usr/bin/docker"
    if not Path(docker).exists():
        pytest.skip("docker binary needed for ExecStart")
    for runtime in ("real", "sim"):
        unit = next(
            f for f in render(topology, RenderOptions(runtime=runtime, docker_bin=docker)) if f.kind == "unit"
        )
        target = tmp_path / runtime / Path(unit.path).name
        target.parent.mkdir()
        target.write_text(unit.content)
        result = subprocess.run(
            [SYSTEMD_ANALYZE, "verify", str(target)], check=False, capture_output=True, text=True, timeout=60
        )
        assert result.returncode == 0 and result.stderr.strip() == "", result.stderr


@pytest.mark.skipif(SYSTEMD_ANALYZE is None, reason="systemd-analyze not installed")
def test_systemd_analyze_check_catches_a_broken_unit(tmp_path):
    # Control for the test above: verify's warnings go to stderr with exit 0, so stderr is checked.
    target = tmp_path / "broken.service"
    target.write_text("[Service]\nType=bogus\nExecStart=/bin/true\n")
    result = subprocess.run(
        [SYSTEMD_ANALYZE, "verify", str(target)], check=False, capture_output=True, text=True, timeout=60
    )
    assert result.stderr.strip() != ""


def test_a_tuned_moe_config_cache_is_mounted_read_only_where_sglang_looks():
    plain = compose(rendered("tp4x2"))["services"]["replica0"]
    assert "environment" not in plain
    tuned = compose(rendered("tp4x2", moe_config_dir="/var/lib/sglnode/moe-configs"))["services"]
    for name in ("replica0", "replica1"):
        assert "/var/lib/sglnode/moe-configs:/opt/sglnode/moe-configs:ro" in tuned[name]["volumes"]
        assert tuned[name]["environment"] == {"SGLANG_MOE_CONFIG_DIR": "/opt/sglnode/moe-configs"}
    assert "volumes" not in tuned["router"]
    with pytest.raises(ValueError, match="absolute"):
        RenderOptions(moe_config_dir="relative/dir")
