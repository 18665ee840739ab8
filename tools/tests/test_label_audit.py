"""benchmarks/label_audit.py: a blind second reading that names no item and relabels only by verdict."""

import json
import stat
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import label_audit as audit  # noqa: E402

ITEMS = {
    # name: (cause, phase, split, log)
    "1-oom-weights-loading": ("oom", "weights", "test", "torch.OutOfMemoryError: CUDA out of memory."),
    "2-nccl-unhandled": ("nccl", None, "test", "RuntimeError: NCCL error: unhandled system error"),
    "3-hang-no-watchdog": ("watchdog_timeout", None, "test", "Capturing batches (bs=8): 40%"),
    "4-train-port": ("port_in_use", None, "train", "OSError: [Errno 98] Address already in use"),
}


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    folder = tmp_path / "corpus"
    folder.mkdir()
    for name, (cause, phase, split, log) in ITEMS.items():
        meta = {
            "source_url": f"https://github.com/example/project/issues/{name[0]}",
            "title": "a report",
            "cause": cause,
            "phase": phase,
            "settled": "the excerpt says so",
            "library": "sglang",
            "label_uncertain": False,
            "tags": [],
            "split": split,
        }
        (folder / f"{name}.yaml").write_text(yaml.safe_dump(meta, sort_keys=False), encoding="utf-8")
        (folder / f"{name}.log").write_text(log + "\n", encoding="utf-8")
    monkeypatch.setattr(audit.bench, "CORPUS", folder)
    return folder


def blind_as(key: dict, labels_by_name: dict, out: Path) -> None:
    """Write an annotator's file: the corpus's labels except where labels_by_name says otherwise."""
    readings = {}
    for item, entry in key.items():
        label = labels_by_name.get(entry["name"], entry["label"])
        cause, _, phase = label.partition("(")
        readings[item] = {"cause": cause, "phase": phase.rstrip(")") or None, "confident": True}
    for chunk in {entry["chunk"] for entry in key.values()}:
        mine = {item: r for item, r in readings.items() if key[item]["chunk"] == chunk}
        (out / f"chunk{chunk}" / "blind.json").write_text(json.dumps(mine), encoding="utf-8")


def test_prepare_hides_names_and_labels_and_keeps_the_key_private(corpus, tmp_path):
    out, key_path = tmp_path / "audit", tmp_path / "private" / "key.json"
    key = audit.prepare("test", out, key_path, chunks=2, seed=3)
    assert len(key) == 3 and {entry["name"] for entry in key.values()} == {
        name for name, spec in ITEMS.items() if spec[2] == "test"
    }
    copies = sorted(out.glob("chunk*/items/*.log"))
    assert len(copies) == 3
    for copy in copies:
        entry = key[copy.stem]
        assert not any(word in copy.name for word in ("oom", "nccl", "hang"))
        assert copy.read_text() == (corpus / f"{entry['name']}.log").read_text()
    convention = (out / "chunk1" / "CONVENTIONS.md").read_text()
    assert "## Causes" in convention and audit.PROTOCOL_HEADING not in convention
    assert stat.S_IMODE(key_path.stat().st_mode) == 0o600


def picking(cases: dict, key: dict, wanted: dict) -> dict:
    """An adjudicator's verdicts: for each case, the option that is wanted[item name] ("neither" as is)."""
    verdicts = {}
    for case, laid in cases.items():
        label = wanted[key[laid["item"]]["name"]]
        pick = "neither" if label == "neither" else "AB"[laid["options"].index(label)]
        verdicts[case] = {"pick": pick}
    return verdicts


def two_rounds(key: dict, readings: dict, out: Path, tmp_path: Path, first: dict, second: dict) -> list:
    rounds = []
    for number, wanted in enumerate((first, second), 1):
        cases_dir, cases_key = tmp_path / f"round{number}", tmp_path / f"round{number}.json"
        cases = audit.lay_out_cases(key, readings, out, cases_dir, cases_key, groups=1, seed=number)
        (cases_dir / "group1" / "verdicts.json").write_text(json.dumps(picking(cases, key, wanted)))
        rounds.append((cases, audit.verdicts_of(cases_dir, cases)))
    return rounds


def test_cases_show_both_labels_unattributed(corpus, tmp_path):
    out, key_path = tmp_path / "audit", tmp_path / "key.json"
    key = audit.prepare("test", out, key_path, chunks=1, seed=5)
    blind_as(key, {"3-hang-no-watchdog": "unknown", "1-oom-weights-loading": "oom(runtime)"}, out)
    readings = audit.blind_readings(out, key)
    figures = audit.agreement(key, readings)
    assert (figures["agree"], figures["agree_cause"], figures["items"]) == (1, 2, 3)
    assert figures["pairs"] == {("watchdog_timeout", "unknown"): 1, ("oom(weights)", "oom(runtime)"): 1}

    cases_dir, cases_key = tmp_path / "cases", tmp_path / "cases.json"
    cases = audit.lay_out_cases(key, readings, out, cases_dir, cases_key, groups=1, seed=1)
    assert len(cases) == 2 and stat.S_IMODE(cases_key.stat().st_mode) == 0o600
    listing = (cases_dir / "group1" / "OPTIONS.txt").read_text()
    for case, laid in cases.items():
        assert f"{case}: option A = {laid['options'][0]}   option B = {laid['options'][1]}" in listing
        assert (cases_dir / "group1" / "cases" / f"{case}.log").read_text() == (
            corpus / f"{key[laid['item']]['name']}.log"
        ).read_text()
    assert "corpus" not in listing and "blind" not in listing


def test_a_label_changes_only_when_every_round_picks_the_blind_reading(corpus, tmp_path, capsys):
    out, key_path = tmp_path / "audit", tmp_path / "key.json"
    key = audit.prepare("test", out, key_path, chunks=1, seed=5)
    blind = {
        "3-hang-no-watchdog": "unknown",
        "1-oom-weights-loading": "oom(runtime)",
        "2-nccl-unhandled": "cuda_graph_capture",
    }
    blind_as(key, blind, out)
    rounds = two_rounds(
        key,
        audit.blind_readings(out, key),
        out,
        tmp_path,
        first={
            "3-hang-no-watchdog": "unknown",
            "1-oom-weights-loading": "oom(weights)",
            "2-nccl-unhandled": "cuda_graph_capture",
        },
        second={
            "3-hang-no-watchdog": "unknown",
            "1-oom-weights-loading": "oom(weights)",
            "2-nccl-unhandled": "nccl",
        },
    )
    assert len(rounds) == 2
    arguments = ["apply", "--key", str(key_path), "--date", "2026-12-02"]
    for number in (1, 2):
        arguments += ["--round", str(tmp_path / f"round{number}.json"), str(tmp_path / f"round{number}")]
    assert audit.main(arguments) == 0
    assert "relabelled 1, questioned (label kept, marked uncertain) 1, kept 1" in capsys.readouterr().out

    hang = yaml.safe_load((corpus / "3-hang-no-watchdog.yaml").read_text())
    assert (hang["cause"], hang["phase"], hang["label_uncertain"]) == ("unknown", None, True)
    assert "the label was watchdog_timeout" in hang["settled"] and hang["split"] == "test"
    kept = yaml.safe_load((corpus / "1-oom-weights-loading.yaml").read_text())
    assert (kept["cause"], kept["phase"], kept["label_uncertain"]) == ("oom", "weights", False)
    assert kept["settled"] == "the excerpt says so"
    split = yaml.safe_load((corpus / "2-nccl-unhandled.yaml").read_text())
    assert (split["cause"], split["label_uncertain"]) == ("nccl", True)
    assert "read cuda_graph_capture" in split["settled"] and "nccl is kept" in split["settled"]


def test_neither_in_one_round_keeps_the_label_and_marks_it_uncertain(corpus, tmp_path):
    out, key_path = tmp_path / "audit", tmp_path / "key.json"
    key = audit.prepare("test", out, key_path, chunks=1, seed=5)
    blind_as(key, {"1-oom-weights-loading": "oom(kv_cache)"}, out)
    rounds = two_rounds(
        key,
        audit.blind_readings(out, key),
        out,
        tmp_path,
        first={"1-oom-weights-loading": "neither"},
        second={"1-oom-weights-loading": "oom(kv_cache)"},
    )
    assert audit.apply(key, rounds, "2026-12-02") == {"questioned": 1}
    meta = yaml.safe_load((corpus / "1-oom-weights-loading.yaml").read_text())
    assert (meta["cause"], meta["phase"], meta["label_uncertain"]) == ("oom", "weights", True)


def test_rounds_that_judged_other_items_change_nothing(corpus, tmp_path):
    out, key_path = tmp_path / "audit", tmp_path / "key.json"
    key = audit.prepare("test", out, key_path, chunks=1, seed=5)
    blind_as(key, {"3-hang-no-watchdog": "unknown", "2-nccl-unhandled": "unknown"}, out)
    readings = audit.blind_readings(out, key)
    both = {"3-hang-no-watchdog": "unknown", "2-nccl-unhandled": "unknown"}
    rounds = two_rounds(key, readings, out, tmp_path, first=both, second=both)
    cases, picks = rounds[1]
    dropped = next(iter(cases))
    rounds[1] = ({c: v for c, v in cases.items() if c != dropped}, picks)
    before = {path.name: path.read_text() for path in corpus.glob("*.yaml")}
    with pytest.raises(audit.AuditError, match="did not judge the same items"):
        audit.apply(key, rounds, "2026-12-02")
    assert {path.name: path.read_text() for path in corpus.glob("*.yaml")} == before


def test_incomplete_or_invalid_files_are_refused_before_anything_changes(corpus, tmp_path, capsys):
    out, key_path = tmp_path / "audit", tmp_path / "key.json"
    key = audit.prepare("test", out, key_path, chunks=1, seed=5)
    blind_as(key, {}, out)
    readings = json.loads((out / "chunk1" / "blind.json").read_text())
    first = sorted(readings)[0]
    readings[first] = {"cause": "oom", "phase": None}  # an OOM without its phase
    del readings[sorted(readings)[1]]
    (out / "chunk1" / "blind.json").write_text(json.dumps(readings))
    before = {path.name: path.read_text() for path in corpus.glob("*.yaml")}
    code = audit.main(["compare", "--key", str(key_path), "--blind", str(out)])
    assert code == 2
    assert "1 items missing, 1 not a valid label" in capsys.readouterr().err
    assert {path.name: path.read_text() for path in corpus.glob("*.yaml")} == before
