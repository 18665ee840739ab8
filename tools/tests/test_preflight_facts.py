"""The preflight role's read-only fact module, against a fake sysfs and captured lspci output."""

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = Path(__file__).parent / "fixtures" / "preflight"
SECURE_BOOT_VAR = "firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"


@pytest.fixture(scope="module")
def facts_module():
    path = ROOT / "roles" / "preflight" / "library" / "gpu_node_facts.py"
    spec = importlib.util.spec_from_file_location("gpu_node_facts", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _device(sysfs, bus_id, vendor, pci_class, iommu_type=None):
    device = sysfs / "bus" / "pci" / "devices" / bus_id
    device.mkdir(parents=True)
    (device / "vendor").write_text(vendor + "\n")
    (device / "class").write_text(pci_class + "\n")
    (device / "device").write_text("0x2bb5\n")
    if iommu_type:
        (device / "iommu_group").mkdir()
        (device / "iommu_group" / "type").write_text(iommu_type + "\n")


def test_only_nvidia_display_and_3d_devices_count_as_gpus(facts_module, tmp_path):
    _device(tmp_path, "0000:02:00.0", "0x10de", "0x030200")
    _device(tmp_path, "0000:03:00.0", "0x10de", "0x030000")
    _device(tmp_path, "0000:02:00.1", "0x10de", "0x040300")  # the GPU's HDMI audio function
    _device(tmp_path, "0000:04:00.0", "0x1002", "0x030000")  # another vendor's GPU
    gpus = facts_module.pci_gpus(str(tmp_path))
    assert [gpu["bus_id"] for gpu in gpus] == ["0000:02:00.0", "0000:03:00.0"]


def test_acs_redirect_is_found_on_bridges_only(facts_module):
    text = (FIXTURES / "lspci-acs.txt").read_text()
    # The switch port has ACS off and the GPU endpoint is not a bridge: only 00:01.0 counts.
    assert facts_module.acs_bridges(text) == ["00:01.0"]


@pytest.mark.parametrize(
    ("has_iommu", "group_type", "cmdline", "expected"),
    [
        (False, None, "quiet", "off"),
        (True, "identity", "quiet", "passthrough"),
        (True, None, "quiet iommu=pt", "passthrough"),
        (True, "DMA-FQ", "iommu=pt", "translated"),
        (True, None, "quiet", "translated"),
    ],
)
def test_iommu_mode_follows_gpu_group_type_and_cmdline(
    facts_module, tmp_path, has_iommu, group_type, cmdline, expected
):
    if has_iommu:
        (tmp_path / "class" / "iommu" / "dmar0").mkdir(parents=True)
    gpus = [{"iommu_group_type": group_type}]
    assert facts_module.iommu_mode(str(tmp_path), cmdline, gpus) == expected


@pytest.mark.parametrize(
    ("payload", "expected"), [(b"\x06\x00\x00\x00\x01", True), (b"\x06\x00\x00\x00\x00", False)]
)
def test_secure_boot_reads_the_efi_variable(facts_module, tmp_path, payload, expected):
    var = tmp_path / SECURE_BOOT_VAR
    var.parent.mkdir(parents=True)
    var.write_bytes(payload)
    assert facts_module.secure_boot(str(tmp_path)) is expected


def test_secure_boot_is_unknown_without_efi(facts_module, tmp_path):
    assert facts_module.secure_boot(str(tmp_path)) is None


TOPO_2SOCKET = (FIXTURES / "topo-m-8gpu-2socket.txt").read_text()


def test_gpu_paths_read_only_the_gpu_columns_of_topo_m(facts_module):
    paths = facts_module.gpu_paths(TOPO_2SOCKET)
    assert sorted(paths) == [f"GPU{i}" for i in range(8)]
    assert paths["GPU0"]["GPU1"] == "NODE" and paths["GPU0"]["GPU4"] == "SYS" and paths["GPU5"]["GPU5"] == "X"
    assert all(len(row) == 8 for row in paths.values())  # NIC and affinity columns left out


@pytest.mark.parametrize(
    ("worst", "safe", "level"),
    [
        ("SYS", True, "SYS"),
        ("NODE", True, "PHB"),
        ("PXB", True, "PXB"),
        ("NV4", True, "NVL"),
        ("SYS", False, ""),
    ],
)
def test_p2p_level_admits_every_pair_only_when_p2p_is_safe(facts_module, worst, safe, level):
    topo = f"\tGPU0\tGPU1\nGPU0\t X \t{worst}\nGPU1\t{worst}\t X \n"
    assert facts_module.p2p_level(facts_module.gpu_paths(topo), safe) == level


def test_an_unreadable_or_unknown_matrix_leaves_the_level_to_nccl(facts_module):
    assert facts_module.gpu_paths("") is None
    assert facts_module.gpu_paths("no gpus here\n") is None
    assert (
        facts_module.p2p_level(facts_module.gpu_paths("\tGPU0\tGPU1\nGPU0\t X \tC2C\nGPU1\tC2C\t X \n"), True)
        == ""
    )
    assert facts_module.p2p_level(facts_module.gpu_paths(TOPO_2SOCKET), True) == "SYS"
