#!/usr/bin/python
"""Ansible module: read GPU, PCIe, IOMMU and Secure Boot facts of a node from sysfs and tools.

Read-only: it never changes the node. Everything it needs is in sysfs, /proc and (when installed)
`lspci -vvv` and `nvidia-smi`; a missing tool leaves its facts as None instead of failing, because
the same role runs on bare metal, in test containers and on the simulated node.
"""

from __future__ import annotations

DOCUMENTATION = r"""
module: gpu_node_facts
short_description: Gather NVIDIA GPU, PCIe ACS, IOMMU and Secure Boot facts (read-only)
description:
  - Lists NVIDIA GPUs (PCI vendor 0x10de, display/3D class) from sysfs with their IOMMU group type.
  - Parses C(lspci -vvv) for bridges with PCIe ACS redirection enabled, which breaks GPU peer-to-peer.
  - Queries C(nvidia-smi) for names, compute capability and driver version when it is installed.
  - Reads the GPU-to-GPU PCIe paths (C(nvidia-smi topo -m)) and derives the NCCL_P2P_LEVEL that lets
    NCCL use peer-to-peer on every pair, when P2P is safe (no ACS redirect, no translating IOMMU).
options:
  sysfs_root:
    description: Root of sysfs, for tests.
    type: str
    default: /sys
  proc_root:
    description: Root of procfs, for tests.
    type: str
    default: /proc
author: sglnode
"""

RETURN = r"""
gpu_node:
  description: The facts, see the preflight role README for each key.
  returned: always
  type: dict
"""

import glob
import os
import re
import shutil

from ansible.module_utils.basic import AnsibleModule

NVIDIA_VENDOR_ID = "0x10de"
# PCI class codes: 0x0300xx VGA controller, 0x0302xx 3D controller (datacenter/workstation GPUs).
GPU_CLASS_PREFIXES = ("0x0300", "0x0302")
# EFI variable holding the Secure Boot state; its 5th byte is 1 when enabled.
SECURE_BOOT_EFIVAR = "firmware/efi/efivars/SecureBoot-8be4df61-93ca-11d2-aa0d-00e098032b8c"
# IOMMU group types that translate DMA addresses (P2P traffic then goes through the root complex).
TRANSLATING_IOMMU_TYPES = ("DMA", "DMA-FQ")
NVIDIA_SMI_QUERY = "name,compute_cap,driver_version,memory.total,pci.bus_id"
# nvidia-smi topo -m path kinds, nearest first, and the NCCL_P2P_LEVEL value that admits each
# (NCCL's levels LOC < NVL < PIX < PXB < PHB < SYS; nvidia-smi's NODE crosses host bridges inside
# one NUMA node, which NCCL classes as PHB). docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html
TOPO_LEVELS = {"X": "LOC", "NV": "NVL", "PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB", "SYS": "SYS"}
NCCL_LEVEL_ORDER = ("LOC", "NVL", "PIX", "PXB", "PHB", "SYS")


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read().strip()
    except OSError:
        return None


def pci_gpus(sysfs_root: str) -> list[dict]:
    gpus = []
    for device in sorted(glob.glob(os.path.join(sysfs_root, "bus/pci/devices/*"))):
        if _read(os.path.join(device, "vendor")) != NVIDIA_VENDOR_ID:
            continue
        pci_class = _read(os.path.join(device, "class")) or ""
        if not pci_class.startswith(GPU_CLASS_PREFIXES):
            continue
        group_type = _read(os.path.join(device, "iommu_group", "type"))
        gpus.append(
            {
                "bus_id": os.path.basename(device),
                "device_id": _read(os.path.join(device, "device")),
                "iommu_group_type": group_type,
            }
        )
    return gpus


def acs_bridges(lspci_vvv: str) -> list[str]:
    """Bridges whose ACSCtl enables source validation or request/completion redirect.

    With ACS redirect on, peer-to-peer TLPs are forced up to the root complex: NCCL's P2P
    transport then crawls or hangs, so the NCCL env falls back to NCCL_P2P_DISABLE=1.
    """
    found = []
    current = None
    for line in lspci_vvv.splitlines():
        header = re.match(r"^([0-9a-fA-F:.]+) (.*)$", line)
        if header:
            current = header.group(1) if "bridge" in header.group(2).lower() else None
            continue
        if current and "ACSCtl:" in line and re.search(r"(SrcValid|ReqRedir|CmpltRedir)\+", line):
            found.append(current)
    return sorted(set(found))


def nvidia_smi(module: AnsibleModule) -> list[dict] | None:
    binary = shutil.which("nvidia-smi")
    if not binary:
        return None
    rc, out, _ = module.run_command([binary, f"--query-gpu={NVIDIA_SMI_QUERY}", "--format=csv,noheader"])
    if rc != 0:
        return None
    rows = []
    for line in out.strip().splitlines():
        name, cap, driver, memory, bus_id = (part.strip() for part in line.split(","))
        rows.append(
            {"name": name, "compute_cap": cap, "driver_version": driver, "memory": memory, "bus_id": bus_id}
        )
    return rows


def gpu_paths(topo_m: str) -> dict[str, dict[str, str]] | None:
    """GPU-to-GPU path kinds from `nvidia-smi topo -m` (GPU columns only; NIC and affinity columns
    are ignored), or None when the matrix cannot be read."""
    lines = [line for line in topo_m.splitlines() if line.strip()]
    if not lines:
        return None
    header = lines[0].split()
    columns = [name for name in header if re.fullmatch(r"GPU\d+", name)]
    if not columns:
        return None
    paths: dict[str, dict[str, str]] = {}
    for line in lines[1:]:
        cells = line.split()
        if not cells or not re.fullmatch(r"GPU\d+", cells[0]):
            continue
        values = cells[1 : 1 + len(columns)]
        if len(values) < len(columns):
            return None
        kinds = [re.sub(r"^NV\d+$", "NV", value) for value in values]
        paths[cells[0]] = dict(zip(columns, kinds, strict=True))
    return paths or None


def p2p_level(paths: dict[str, dict[str, str]] | None, p2p_safe: bool) -> str:
    """The NCCL_P2P_LEVEL admitting every GPU pair's path; "" (NCCL's own choice) when unknown or unsafe."""
    if not paths or not p2p_safe:
        return ""
    levels = []
    for row in paths.values():
        for value in row.values():
            if value not in TOPO_LEVELS:
                return ""  # a kind this table does not know: leave the decision to NCCL
            levels.append(TOPO_LEVELS[value])
    return max(levels, key=NCCL_LEVEL_ORDER.index)


def nvidia_smi_topo(module: AnsibleModule) -> str | None:
    binary = shutil.which("nvidia-smi")
    if not binary:
        return None
    rc, out, _ = module.run_command([binary, "topo", "-m"])
    return out if rc == 0 else None


def secure_boot(sysfs_root: str) -> bool | None:
    path = os.path.join(sysfs_root, SECURE_BOOT_EFIVAR)
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    return len(data) >= 5 and data[4] == 1


def iommu_mode(sysfs_root: str, cmdline: str, gpus: list[dict]) -> str:
    """'off', 'passthrough' or 'translated', as seen by the GPUs."""
    if not glob.glob(os.path.join(sysfs_root, "class/iommu/*")):
        return "off"
    types = {gpu["iommu_group_type"] for gpu in gpus if gpu["iommu_group_type"]}
    if types & set(TRANSLATING_IOMMU_TYPES):
        return "translated"
    if types == {"identity"} or re.search(r"\biommu=pt\b", cmdline):
        return "passthrough"
    return "translated"


def gather(module: AnsibleModule, sysfs_root: str, proc_root: str) -> dict:
    gpus = pci_gpus(sysfs_root)
    cmdline = _read(os.path.join(proc_root, "cmdline")) or ""
    lspci = shutil.which("lspci")
    bridges: list[str] | None = None
    if lspci:
        rc, out, _ = module.run_command([lspci, "-vvv"])
        bridges = acs_bridges(out) if rc == 0 else None
    smi = nvidia_smi(module)
    mode = iommu_mode(sysfs_root, cmdline, gpus)
    topo = nvidia_smi_topo(module)
    paths = gpu_paths(topo) if topo else None
    safe = not bridges and mode != "translated"
    return {
        "pci_gpus": gpus,
        "pci_gpu_count": len(gpus),
        "nvidia_smi": smi,
        "gpu_names": sorted({row["name"] for row in smi}) if smi else [],
        "compute_caps": sorted({row["compute_cap"] for row in smi}) if smi else [],
        "driver_version": smi[0]["driver_version"] if smi else None,
        "kernel_cmdline": cmdline,
        "iommu_mode": mode,
        "iommu_passthrough_arg": bool(re.search(r"\biommu=pt\b", cmdline)),
        "acs_bridges": bridges,
        "lspci_available": bool(lspci),
        # P2P is unsafe when a bridge redirects peer traffic or the IOMMU translates GPU DMA.
        "p2p_safe": safe,
        "gpu_paths": paths,
        "p2p_level": p2p_level(paths, safe),
        "secure_boot": secure_boot(sysfs_root),
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "sysfs_root": {"type": "str", "default": "/sys"},
            "proc_root": {"type": "str", "default": "/proc"},
        },
        supports_check_mode=True,
    )
    facts = gather(module, module.params["sysfs_root"], module.params["proc_root"])
    module.exit_json(changed=False, gpu_node=facts)


if __name__ == "__main__":
    main()
