"""Conformance: the catalogue of SGLang strings (templates, files, lines) against the pinned wheel.

The pinned wheel is the oracle. These tests fail when the checked-in catalogue (which loglines, the
diagnosis rules and the simulator are built from) is not what the wheel's source says, and they
show that a changed upstream string is caught (a mutated copy of the wheel's source).
"""

import shutil
import zipfile
from pathlib import Path

import pytest

from sglnode.cli import main
from sglnode.readiness import loglines
from sglnode.upstream import catalog
from sglnode.upstream.strings import ExtractError, count, extract
from sglnode.upstream.wheels import WheelSource, pinned_wheel, pins


@pytest.fixture(scope="module")
def wheel() -> Path:
    return pinned_wheel("sglang")


@pytest.fixture
def mutable_source(tmp_path: Path, wheel: Path) -> Path:
    """The wheel's Python files unpacked, for a test to edit."""
    with zipfile.ZipFile(wheel) as archive:
        members = sorted({entry.file for entry in catalog.load().values()})
        archive.extractall(tmp_path, members=members)
    return tmp_path


def test_pinned_wheel_is_the_one_the_catalogue_names(wheel):
    assert wheel.name == pins()["sglang"].file
    version, _ = catalog.parse(catalog.catalog_path().read_text(encoding="utf-8"))
    assert version == pins()["sglang"].version


def test_catalogue_matches_the_pinned_wheel(wheel):
    with WheelSource(wheel) as source:
        drifts = catalog.check(list(catalog.load().values()), source.read)
    assert not drifts, "\n".join(drift.describe() for drift in drifts)


def test_check_command_passes_on_the_pin(capsys, wheel):
    assert main(["upstream", "check"]) == 0
    assert "strings match" in capsys.readouterr().out


def test_a_changed_upstream_line_is_reported_with_what_depends_on_it(mutable_source, capsys):
    graph = mutable_source / catalog.get("capture_decode_end").file
    text = graph.read_text(encoding="utf-8")
    old = 'f"mem usage={memory_usage_gb:.2f} GB, '
    assert text.count(old) == 1
    graph.write_text(text.replace(old, 'f"used={memory_usage_gb:.2f} GB, '))

    with WheelSource(mutable_source) as source:
        drifts = {d.id: d for d in catalog.check(list(catalog.load().values()), source.read)}
    assert set(drifts) == {"capture_decode_end"}
    assert "loglines.CUDA_GRAPH_END_RE" in drifts["capture_decode_end"].used_by
    assert main(["upstream", "check", "--source", str(mutable_source)]) == 1
    assert "capture_decode_end: template changed" in capsys.readouterr().out
    # ... and it matters: our regex would no longer read the graph memory from such a line.
    mutated = drifts["capture_decode_end"].upstream.format(
        capture_name="target decode",
        graph_backend="CUDA graph",
        capture_bs=[1, 2],
        capture_time=1.0,
        memory_usage_gb=1.52,
        after_mem=9.66,
    )
    assert loglines.CUDA_GRAPH_END_RE.search(mutated).group("mem_usage_gb") is None


def test_a_removed_fatal_message_is_reported(mutable_source):
    entry = catalog.get("kv_budget_no_memory")
    path = mutable_source / entry.file
    path.write_text(path.read_text(encoding="utf-8").replace("Loaded weights leave no GPU memory", "No room"))
    with WheelSource(mutable_source) as source:
        drifts = catalog.check([entry], source.read)
    assert [d.id for d in drifts] == ["kv_budget_no_memory"]
    assert "no string contains" in drifts[0].reason


def test_a_moved_line_is_drift_too(mutable_source):
    entry = catalog.get("server_ready")
    path = mutable_source / entry.file
    path.write_text("# one more line\n" + path.read_text(encoding="utf-8"))
    with WheelSource(mutable_source) as source:
        drifts = catalog.check([entry], source.read)
    assert drifts[0].reason.startswith("moved: line")


def test_refresh_rewrites_the_catalogue_to_what_the_source_says(mutable_source, tmp_path, monkeypatch):
    copy = tmp_path / "catalogue.yaml"
    shutil.copy(catalog.catalog_path(), copy)
    monkeypatch.setattr(catalog, "catalog_path", lambda: copy)
    path = mutable_source / catalog.get("server_ready").file
    path.write_text(path.read_text(encoding="utf-8").replace("ready to roll!", "ready to roll!!"))
    assert main(["upstream", "refresh", "--source", str(mutable_source)]) == 0
    _, entries = catalog.parse(copy.read_text(encoding="utf-8"))
    refreshed = {entry.id: entry for entry in entries}
    assert refreshed["server_ready"].text == "The server is fired up and ready to roll!!"
    assert refreshed["load_weight_begin"].text == catalog.get("load_weight_begin").text


def test_every_catalogued_line_is_rendered_exactly_as_upstream_formats_it(wheel):
    # Rendering a template with values gives what the f-string itself would produce.
    entry = catalog.get("kv_budget_no_memory")
    text = entry.render(
        mem_fraction_static=0.35, suggested_mem_fraction_static=0.388, minimum_mem_fraction_static=0.38791
    )
    assert text == (
        "Loaded weights leave no GPU memory for the KV cache under --mem-fraction-static=0.35. "
        "Raise --mem-fraction-static above 0.388 (minimum viable = 1 - available/pre = 0.3879). "
        "If using speculative decoding, draft weights are now counted."
    )
    assert loglines.KV_BUDGET_NO_MEMORY_RE.search(text)


def test_extract_names_fields_after_upstream_expressions():
    source = (
        "import logging\n"
        "logger = logging.getLogger()\n"
        "def f(self, n):\n"
        "    logger.info(f\"a={self.x:.2f} b={n!r} {'y' if self.on else 'z'}\")\n"
        "    logger.info('c=%d d=%.1f', n, self.x)\n"
    )
    first = extract(source, "m.py", "a={x")
    assert first.template == "a={x:.2f} b={n!r} {on}"
    assert first.function == "f"
    second = extract(source, "m.py", "c=")
    assert second.template == "c={n:d} d={x:.1f}"
    with pytest.raises(ExtractError):
        extract(source, "m.py", "not there")


def test_anchors_are_unambiguous_in_the_pinned_wheel(wheel):
    # An anchor that matches several strings would silently pick one: each names its occurrence.
    with WheelSource(wheel) as source:
        for entry in catalog.load().values():
            found = count(source.read(entry.file), entry.contains, entry.file)
            assert found >= 1, entry.id
            if found > 1:
                assert entry.occurrence is not None, f"{entry.id}: {found} strings match; say which"
