"""Static checks of the Ansible side: configuration names only paths that exist, and the roles leave
the simulated node to the inventory and the playbooks (issue 17)."""

from __future__ import annotations

import configparser
import re
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[2]
# ansible.cfg [defaults] keys whose values are paths (colon-separated lists) in this repository.
PATH_KEYS = ("roles_path", "filter_plugins", "library", "module_utils", "action_plugins", "lookup_plugins")
MOLECULE_PATH_ENV = re.compile(r"\$\{MOLECULE_PROJECT_DIRECTORY\}/([^:}\s]+)")


def test_ansible_cfg_names_only_paths_that_exist() -> None:
    config = configparser.ConfigParser()
    config.read(REPO / "ansible.cfg")
    missing = [
        f"{key} = {path}"
        for key in PATH_KEYS
        if config.has_option("defaults", key)
        for path in config.get("defaults", key).split(":")
        if not (REPO / path).exists()
    ]
    assert missing == []


def test_molecule_config_names_only_paths_that_exist() -> None:
    shared = yaml.safe_load((REPO / ".config" / "molecule" / "config.yml").read_text())
    env = shared["provisioner"]["env"]
    missing = [
        f"{name}: {value}"
        for name, value in env.items()
        for path in MOLECULE_PATH_ENV.findall(str(value))
        if not (REPO / path).exists()
    ]
    assert missing == []


def test_roles_do_not_branch_on_the_node_kind() -> None:
    # The simulated node is gated once, in playbooks/*.yml, and its values come from inventory/sim:
    # no role task, handler, default, var or template asks which kind of node it is on.
    mentions = [
        f"{path.relative_to(REPO)}:{number}"
        for path in sorted((REPO / "roles").rglob("*"))
        if path.is_file() and path.suffix in {".yml", ".yaml", ".j2"}
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if "node_kind" in line
    ]
    assert mentions == []


def test_playbooks_gate_the_simulated_node_on_the_inventory() -> None:
    # inventory/sim carries the gate and the become setting the plays used to compute.
    sim = yaml.safe_load((REPO / "inventory" / "sim" / "group_vars" / "gpu_nodes" / "main.yml").read_text())
    assert sim["node_kind"] == "sim"
    assert sim["ansible_become"] is False
    for playbook in sorted((REPO / "playbooks").glob("*.yml")):
        for play in yaml.safe_load(playbook.read_text()):
            assert play["become"] is True, playbook.name
