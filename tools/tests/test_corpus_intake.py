"""benchmarks/corpus_intake.py: new excerpts come in without touching the held-out split."""

import sys
from pathlib import Path

import pytest
import yaml
from yamllint import linter
from yamllint.config import YamlLintConfig

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "benchmarks"))
import corpus_intake as intake  # noqa: E402
from diagnosis_accuracy import split_of as bench_split  # noqa: E402

TRAIN_URL = "https://github.com/example/project/issues/2"
OTHER_TRAIN_URL = "https://github.com/example/project/issues/4"
TEST_URL = "https://github.com/example/project/issues/1"  # sha256 puts it in the held-out split
OOM_LOG = [
    "[2026-01-01 00:00:00 TP0] Load weight begin. avail mem=94.10 GB",
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
    "of 94.97 GiB",
]


def write_item(folder: Path, slug: str, url: str, lines: list[str], **overrides: object) -> None:
    meta = {
        "source_url": url,
        "title": "a report",
        "library": "sglang",
        "sglang_version": None,
        "gpu": None,
        "cause": "oom",
        "phase": "weights",
        "settled": "the excerpt shows a CUDA OOM right after Load weight begin",
        "label_uncertain": False,
        "tags": ["loading"],
        **overrides,
    }
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{slug}.yaml").write_text(yaml.safe_dump(meta), encoding="utf-8")
    (folder / f"{slug}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


@pytest.fixture
def corpus(tmp_path, monkeypatch):
    folder = tmp_path / "corpus"
    write_item(
        folder,
        "7-known-train-item",
        "https://github.com/example/project/issues/5",
        ["RuntimeError: NCCL error: unhandled system error", "[rank0] process group destroyed 12 times"],
        cause="nccl",
        phase=None,
        split="train",
    )
    write_item(
        folder,
        "9-known-test-item",
        "https://github.com/example/project/issues/3",
        ["ValueError: a held-out wording seen by nobody", "at line 17 of the scheduler"],
        cause="unknown",
        phase=None,
        split="test",
    )
    monkeypatch.setattr(intake.bench, "CORPUS", folder)
    return folder


def test_split_of_a_url_is_the_benchmarks_rule():
    assert intake.bench.split_of(TRAIN_URL) == "train"
    assert intake.bench.split_of(TEST_URL) == "test"


def test_check_refuses_test_urls_duplicates_near_copies_and_bad_labels(corpus, tmp_path):
    staging = tmp_path / "staging"
    write_item(staging, "a-good", TRAIN_URL, OOM_LOG)
    write_item(staging, "b-held-out", TEST_URL, ["RuntimeError: something else entirely"])
    write_item(staging, "c-known-url", "https://github.com/example/project/issues/5", ["Error: other words"])
    # the known test item quoted again under a new URL: refused without naming the held-out item
    write_item(
        staging,
        "d-copy-of-test",
        "https://github.com/example/project/issues/6",
        ["ValueError: a held-out wording seen by nobody", "at line 18 of the scheduler"],
        cause="unknown",
        phase=None,
    )
    write_item(staging, "e-oom-without-phase", OTHER_TRAIN_URL, ["CUDA out of memory here"], phase=None)
    write_item(staging, "f-copy-in-batch", "https://github.com/example/project/issues/7", OOM_LOG)
    # a longer log that quotes a short item's line is another report
    write_item(
        staging,
        "g-quotes-a-line",
        "https://github.com/example/project/issues/8",
        [
            "RuntimeError: NCCL error: unhandled system error",
            "rank 3 lost its peer",
            "retrying 1",
            "giving up after 3 retries",
        ],
        cause="nccl",
        phase=None,
    )
    accepted, refused = intake.check(staging)
    assert [path.stem for path, _, _ in accepted] == ["a-good", "g-quotes-a-line"]
    reasons = {line.split(":")[0]: line for line in refused}
    assert "held-out test split" in reasons["b-held-out"]
    assert "already in the corpus" in reasons["c-known-url"]
    assert "near-copy of a held-out corpus item" in reasons["d-copy-of-test"]
    assert "9-known-test-item" not in reasons["d-copy-of-test"]
    assert "phase None" in reasons["e-oom-without-phase"]
    assert "near-copy of another staged item" in reasons["f-copy-in-batch"]


def test_merge_numbers_after_the_last_item_and_sets_the_split(corpus, tmp_path):
    staging = tmp_path / "staging"
    write_item(staging, "sglang-weights-oom", TRAIN_URL, OOM_LOG)
    accepted, refused = intake.check(staging)
    assert not refused
    written = intake.merge(accepted)
    assert [path.name for path in written] == ["10-sglang-weights-oom.yaml"]
    meta = yaml.safe_load(written[0].read_text(encoding="utf-8"))
    assert meta["split"] == "train" and meta["source_url"] == TRAIN_URL
    assert written[0].read_text(encoding="utf-8").startswith(intake.HEADER)
    assert "\ntags:\n  - loading\n" in written[0].read_text(encoding="utf-8"), (
        "lists indented, as yamllint wants"
    )
    assert written[0].with_suffix(".log").read_text(encoding="utf-8").splitlines() == OOM_LOG
    # merged once, the same report is now a duplicate
    assert not intake.check(staging)[0]


def test_merge_writes_what_yamllint_accepts_even_for_a_url_too_long_to_fold(corpus, tmp_path):
    long_url = next(
        url for n in range(100) if bench_split(url := f"{TRAIN_URL}/{'deep/' * 40}{n}.log") == "train"
    )
    staging = tmp_path / "staging"
    write_item(staging, "long-url", long_url, OOM_LOG)
    written = intake.merge(intake.check(staging)[0])
    text = written[0].read_text(encoding="utf-8")
    config = YamlLintConfig(file=str(REPO / ".yamllint"))
    assert [problem.desc for problem in linter.run(text, config)] == []
    assert yaml.safe_load(text)["source_url"] == long_url


def test_score_is_the_current_rules_on_the_batch(corpus, tmp_path):
    staging = tmp_path / "staging"
    write_item(staging, "sglang-weights-oom", TRAIN_URL, OOM_LOG)
    write_item(
        staging,
        "mislabelled",
        OTHER_TRAIN_URL,
        ["RuntimeError: NCCL error in: ProcessGroupNCCL.cpp:1970, unhandled cuda error"],
        cause="port_in_use",
        phase=None,
    )
    result = intake.score(intake.check(staging)[0])
    assert result["items"] == 2 and result["right"] == 1
    assert [miss[0] for miss in result["misses"]] == ["mislabelled"]


def test_merge_takes_a_batch_whole_or_not_at_all_and_bad_yaml_is_a_refusal(corpus, tmp_path, capsys):
    staging = tmp_path / "staging"
    write_item(staging, "a-good", TRAIN_URL, OOM_LOG)
    (staging / "b-broken.yaml").write_text("source_url: [unclosed\n", encoding="utf-8")
    (staging / "b-broken.log").write_text("RuntimeError: x\n", encoding="utf-8")
    assert intake.main(["merge", str(staging)]) == 1
    out = capsys.readouterr()
    assert "refused b-broken: unreadable: " in out.out and "nothing merged" in out.err
    assert sorted(path.name for path in corpus.glob("*.yaml")) == [
        "7-known-train-item.yaml",
        "9-known-test-item.yaml",
    ]
    (staging / "b-broken.yaml").unlink()
    assert intake.main(["merge", str(staging)]) == 0
    assert (corpus / "10-a-good.yaml").exists()
