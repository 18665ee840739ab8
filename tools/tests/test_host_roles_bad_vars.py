"""Bad host-role variables fail in the role's checks, before the role changes anything.

Each case runs a role's variable checks (its "preflight" argument spec and tasks/preflight.yml) with
ansible-playbook on localhost, exactly as the playbooks run them on the simulated node, where the
rest of these hardware roles is skipped. A failing case must name the problem and change nothing;
the control case shows good variables pass the same checks. That these checks come first in the
role, before any task that changes the node, is checked on each role's tasks/main.yml; the whole
role runs in its molecule scenario.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from sglnode.pins import PINS

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(__file__).parent / "fixtures" / "host_roles" / "run-role.yml"
RUN_TIMEOUT_S = 180
BLACKWELL_NODE = {"gpu_count": 8, "gpu_names": [PINS.gpu.device_name], "ram_gb": 64}


def ansible_playbook() -> str:
    local = Path(sys.executable).with_name("ansible-playbook")
    return str(local) if local.exists() else shutil.which("ansible-playbook") or "ansible-playbook"


def run_role(role: str, prefix: Path, extra: dict[str, object]) -> subprocess.CompletedProcess[str]:
    variables = {
        "role_under_test": role,
        "node_prefix": str(prefix),
        "gpu_node": BLACKWELL_NODE,
        # Modules run under this interpreter, not whatever `python3` the PATH happens to offer.
        "ansible_python_interpreter": sys.executable,
    }
    variables.update(extra)
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO_ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.run(
        [ansible_playbook(), "-i", "localhost,", str(PLAYBOOK), "-e", json.dumps(variables)],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )


def changed_count(output: str) -> int:
    match = re.search(r"localhost\s*:\s*ok=\d+\s+changed=(\d+)", output)
    assert match, output[-2000:]
    return int(match.group(1))


BAD_VARIABLES = [
    pytest.param(
        "nvidia_driver",
        {"nvidia_driver_branch": 550},
        "cannot drive Blackwell GPUs",
        id="driver-550-on-blackwell",
    ),
    pytest.param(
        "nvidia_driver",
        {"nvidia_driver_source": "runfile"},
        "nvidia_driver_source must be one of: cuda_repo, distro",
        id="unknown-driver-source",
    ),
    pytest.param(
        "cuda_toolkit", {"cuda_toolkit_version": "12.4"}, "it needs CUDA >= 12.8", id="cuda-12.4-for-sm120"
    ),
    pytest.param(
        "cuda_toolkit",
        {"nvidia_driver_branch": 570},
        "needs driver branch >= 580",
        id="cuda-13-on-driver-570",
    ),
    pytest.param(
        "flash_attn",
        {"flash_attn_cuda_archs": ["90", "100"]},
        'include "120"',
        id="flash-attn-archs-without-120",
    ),
    pytest.param(
        "flash_attn",
        {"flash_attn_max_jobs": 32},
        "MAX_JOBS=32 needs about 192",
        id="flash-attn-max-jobs-beyond-ram",
    ),
]


@pytest.mark.parametrize(("role", "extra", "message"), BAD_VARIABLES)
def test_bad_variable_fails_before_any_change(tmp_path: Path, role: str, extra: dict, message: str) -> None:
    prefix = tmp_path / "node"
    prefix.mkdir()
    result = run_role(role, prefix, extra)
    output = result.stdout + result.stderr
    assert result.returncode != 0, output[-2000:]
    assert message in output
    assert changed_count(output) == 0
    assert list(prefix.iterdir()) == []


HOST_ROLES = ["nvidia_driver", "cuda_toolkit", "container_runtime", "flash_attn"]


@pytest.mark.parametrize("role", HOST_ROLES)
def test_good_variables_pass_the_same_checks(tmp_path: Path, role: str) -> None:
    # Control: the same run with good variables passes, so a failure above is the bad variable's.
    prefix = tmp_path / "node"
    prefix.mkdir()
    result = run_role(role, prefix, {})
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-3000:]
    assert changed_count(output) == 0


@pytest.mark.parametrize("role", HOST_ROLES)
def test_role_checks_its_variables_before_anything_else(role: str) -> None:
    main = yaml.safe_load((REPO_ROOT / "roles" / role / "tasks" / "main.yml").read_text())
    assert main[0]["ansible.builtin.include_tasks"] == "preflight.yml"
    assert "when" not in main[0]
