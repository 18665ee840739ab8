"""What the preflight role must leave on a (GPU-less) test container."""

import json

FACT_FILE = "/etc/ansible/facts.d/gpu_node.fact"


def _facts(host):
    return json.loads(host.file(FACT_FILE).content_string)


def test_fact_file_is_root_owned_and_world_readable(host):
    fact = host.file(FACT_FILE)
    assert fact.exists
    assert fact.user == "root"
    assert fact.mode == 0o644


def test_fact_file_records_unenforced_hardware_checks_and_the_os(host):
    facts = _facts(host)
    assert facts["hardware_checked"] is False
    assert facts["os_id"] == "Debian"
    assert facts["os_version"].startswith("12")


def test_fact_file_reports_no_gpus_in_a_container(host):
    facts = _facts(host)
    assert facts["gpu_count"] == 0
    assert facts["nvidia_smi"] is None
    assert facts["driver_version"] is None


def test_volatile_free_disk_is_left_out_of_the_file(host):
    assert "disk_free_gb" not in _facts(host)


def test_p2p_verdict_and_iommu_mode_are_recorded(host):
    facts = _facts(host)
    assert isinstance(facts["p2p_safe"], bool)
    assert facts["iommu_mode"] in {"off", "passthrough", "translated"}
    # No nvidia-smi in the test container: no PCIe path matrix, and the P2P level is left to NCCL.
    assert facts["gpu_paths"] is None and facts["p2p_level"] == ""
