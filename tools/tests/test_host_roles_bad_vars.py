"""Bad host-role variables fail in preflight, before the role changes anything.

Each case runs a whole role (argument specs + preflight + the rest) with ansible-playbook on
localhost as the simulated node, whose config files land under a temporary node_prefix. A
failing case must name the problem and leave that prefix empty; the control case shows the
same run does write files there when the variables are good.
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

REPO_ROOT = Path(__file__).resolve().parents[2]
PLAYBOOK = Path(__file__).parent / "fixtures" / "host_roles" / "run-role.yml"
RUN_TIMEOUT_S = 180
BLACKWELL_NODE = {"gpu_count": 8, "gpu_names": ["NVIDIA RTX PRO 6000 Blackwell Server Edition"], "ram_gb": 64}


def ansible_playbook() -> str:
    local = Path(sys.executable).with_name("ansible-playbook")
    return str(local) if local.exists() else shutil.which("ansible-playbook") or "ansible-playbook"


def run_role(role: str, prefix: Path, extra: dict[str, object]) -> subprocess.CompletedProcess[str]:
    variables = {
        "role_under_test": role,
        "node_kind": "sim",
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


@pytest.mark.parametrize(
    ("role", "rendered"),
    [
        ("nvidia_driver", "etc/modprobe.d/nvidia-sglnode.conf"),
        ("cuda_toolkit", "etc/profile.d/cuda-sglnode.sh"),
        ("container_runtime", "etc/docker/daemon.json"),
    ],
)
def test_good_variables_render_under_prefix(tmp_path: Path, role: str, rendered: str) -> None:
    # Control: the same run with good variables does write, so an empty prefix above means "failed early".
    prefix = tmp_path / "node"
    prefix.mkdir()
    result = run_role(role, prefix, {})
    assert result.returncode == 0, (result.stdout + result.stderr)[-3000:]
    assert (prefix / rendered).is_file()
