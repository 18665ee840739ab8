"""SGLang's own code, run in the real sglang image, against what this repo recorded from it.

The image (`make image`; its tag in .cache/sglang-image.tag) holds the pinned sglang 0.5.23 with its
whole dependency stack. Here its ServerArgs resolution and KV-pool configurators run on the node
double (tools/oracle/), and its real argparse is dumped: the outputs must equal the recorded
snapshot (fixtures/oracle/, which test_planning_port.py holds the planner's port to) and the flag
catalogue the topology validator and the simulator use (topology/sglang_flags.yaml).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from docker_available import built_sglang_image

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "tools" / "oracle"))
import matrix  # noqa: E402  (tools/oracle is not a package: it runs inside the image)

ORACLE_DIR = REPO / "tools" / "oracle"
MODELS_DIR = REPO / "tools" / "sglnode" / "planning" / "models" / "hf"
FLAGS_SCRIPT = REPO / "tools" / "sglnode" / "topology" / "regen_sglang_flags.py"
FLAGS_FILE = REPO / "tools" / "sglnode" / "topology" / "sglang_flags.yaml"
SNAPSHOT = Path(__file__).parent / "fixtures" / "oracle" / "sglang-0.5.23-memory.jsonl"
# The image's driver-less library folder: a stub libcuda.so.1 so sgl_kernel imports without a GPU.
NO_GPU_LIBS = "/opt/sglnode/no-gpu"
RUN_TIMEOUT_S = 600

pytestmark = [pytest.mark.docker, pytest.mark.sglang_image]


@pytest.fixture(scope="module")
def image() -> str:
    return built_sglang_image()


def run_in_image(
    image: str, command: list[str], stdin: str = "", mounts: dict[Path, str] | None = None
) -> str:
    argv = ["docker", "run", "--rm", "-i", "--network", "none", "-e", f"LD_LIBRARY_PATH={NO_GPU_LIBS}"]
    for host, target in (mounts or {}).items():
        argv += ["-v", f"{host}:{target}:ro"]
    result = subprocess.run(
        [*argv, image, *command],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return result.stdout


def test_upstream_code_in_the_image_computes_the_recorded_memory_snapshot(image):
    cases = matrix.cases("/models")
    output = run_in_image(
        image,
        ["python3", "/oracle/memory_oracle.py"],
        stdin=json.dumps(cases),
        mounts={ORACLE_DIR: "/oracle", MODELS_DIR: "/models"},
    )
    upstream = {row["id"]: row for row in json.loads(output)}
    recorded = {row["id"]: row for row in map(json.loads, SNAPSHOT.read_text(encoding="utf-8").splitlines())}
    assert set(upstream) == set(recorded)
    differing = [case_id for case_id in recorded if upstream[case_id] != recorded[case_id]]
    assert not differing, f"{len(differing)} cases differ from the snapshot, e.g. {differing[:3]}"


def test_flag_catalogue_is_the_images_own_argparse(image):
    output = run_in_image(
        image,
        ["python3", "/regen/regen_sglang_flags.py", "--json", "--installed"],
        mounts={FLAGS_SCRIPT.parent: "/regen"},
    )
    upstream = json.loads(output)
    recorded = yaml.safe_load(FLAGS_FILE.read_text(encoding="utf-8"))["flags"]
    missing = sorted(set(upstream) - set(recorded))
    extra = sorted(set(recorded) - set(upstream))
    assert not missing and not extra, f"not in the catalogue: {missing}; not in SGLang: {extra}"
    changed = sorted(flag for flag in upstream if upstream[flag] != recorded[flag])
    assert not changed, changed


AUDIT_SNAPSHOT = REPO / "tools" / "sglnode" / "topology" / "kernel-audit.json"
AUDIT_FIELDS = ("target_sm", "packages", "jit_packages", "distributions", "toolchains")


def test_shipped_kernel_audit_is_the_images_own(image):
    # `sglnode topology check` judges backend choices on this copy when no audit is given: it must be
    # what the image built from this lock says (refresh: docker run IMAGE cat /opt/sglnode/kernel-audit.json).
    upstream = json.loads(run_in_image(image, ["cat", "/opt/sglnode/kernel-audit.json"]))
    shipped = json.loads(AUDIT_SNAPSHOT.read_text(encoding="utf-8"))
    for field in AUDIT_FIELDS:
        assert shipped.get(field) == upstream.get(field), f"kernel-audit.json {field} differs from {image}'s"


def test_serverargs_defaults_the_repo_relies_on_are_the_images(image):
    recorded = yaml.safe_load(FLAGS_FILE.read_text(encoding="utf-8"))["defaults"]
    # An unresolved ServerArgs holds the declared defaults (resolution happens in resolve_once()).
    script = (
        "import json, sys\n"
        "from sglang.srt.server_args import ServerArgs\n"
        "args = ServerArgs(model_path='/nonexistent')\n"
        "print(json.dumps({name: getattr(args, name) for name in json.loads(sys.argv[1])}))\n"
    )
    output = run_in_image(image, ["python3", "-c", script, json.dumps(sorted(recorded))])
    assert json.loads(output) == recorded
