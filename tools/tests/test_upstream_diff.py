"""`sglnode upstream diff`: a pin bump as a reviewed diff (flags, strings, memory rules, messages)."""

import json
import zipfile
from pathlib import Path

import pytest

from sglnode.cli import main
from sglnode.pins import PINS
from sglnode.upstream.diff import diff_releases, function_source, raised_messages
from sglnode.upstream.wheels import WheelSource, pinned_wheel

# Two consecutive SGLang releases on PyPI whose differences the diff command must find (their wheels are
# in upstream/wheels.yaml); a fixed piece of history, not the pinned version.
HISTORICAL_RELEASES = ("0.5.22", "0.5.23")


@pytest.fixture(scope="module")
def pinned() -> Path:
    return pinned_wheel("sglang")


@pytest.fixture(scope="module")
def edited_release(tmp_path_factory, pinned) -> Path:
    """The pinned release's Python source with three upstream-style edits."""
    root = tmp_path_factory.mktemp("sglang-next")
    with zipfile.ZipFile(pinned) as wheel:
        wheel.extractall(root, members=[m for m in wheel.namelist() if m.endswith(".py") or "dist-info" in m])
    hook = root / "sglang/srt/arg_groups/memory_hook.py"
    hook.write_text(
        hook.read_text().replace(
            "reserved_mem = max(reserved_mem, 10 * 1024)", "reserved_mem = max(reserved_mem, 12 * 1024)"
        )
    )
    setup = root / "sglang/srt/model_executor/model_runner_components/cuda_graph_setup.py"
    setup.write_text(
        setup.read_text().replace(
            'f"mem usage={memory_usage_gb:.2f} GB, ', 'f"used={memory_usage_gb:.2f} GB, '
        )
    )
    network = root / "sglang/srt/utils/network.py"
    network.write_text(
        network.read_text() + '\n\ndef _new():\n    raise RuntimeError("port plan exhausted")\n'
    )
    return root


def test_diff_names_each_change_and_what_depends_on_it(pinned, edited_release):
    with WheelSource(pinned) as old, WheelSource(edited_release) as new:
        report = diff_releases(old, new)
    assert report["old"] == PINS.sglang
    assert report["flags"]["added"] == report["flags"]["removed"] == []
    (string,) = report["strings"]
    assert string["id"] == "capture_decode_end" and "loglines.CUDA_GRAPH_END_RE" in string["used_by"]
    functions = [item["function"] for item in report["memory_functions"]]
    assert functions == ["sglang/srt/arg_groups/memory_hook.py:handle_gpu_memory_settings"]
    added = [line for line in report["memory_functions"][0]["diff"].splitlines() if line.startswith("+ ")]
    assert [line[1:].strip() for line in added] == ["reserved_mem = max(reserved_mem, 12 * 1024)"]
    (raised,) = report["raised_messages"]
    assert raised["file"] == "sglang/srt/utils/network.py" and raised["added"] == ["port plan exhausted"]


def test_diff_command_against_the_previous_release(capsys):
    # Two real releases from PyPI, named for what changed between them (history, not the pin): the MLA
    # prefill-graph cap moved from 2048 to 8192 tokens, and the newer added --enable-http-worker-reuseport.
    assert main(["upstream", "diff", *HISTORICAL_RELEASES, "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert (report["old"], report["new"]) == HISTORICAL_RELEASES
    assert "--enable-http-worker-reuseport" in report["flags"]["added"]
    hook = next(m for m in report["memory_functions"] if m["function"].endswith("handle_gpu_memory_settings"))
    assert "-            prefill_cuda_graph_config.max_bs = 2048" in hook["diff"]
    assert (
        "+            prefill_cuda_graph_config.max_bs = min(8192, cfg.chunked_prefill_size)" in hook["diff"]
    )


def test_function_source_and_raised_messages_read_source_only():
    text = (
        "class A:\n    def f(self):\n        raise ValueError(f'bad {x} value')\n\n"
        "def g():\n    raise KeyError('k')\n"
    )
    assert function_source(text, "A.f").startswith("def f(self):")
    assert function_source(text, "A.h") is None
    assert raised_messages(text) == {"bad {} value", "k"}
