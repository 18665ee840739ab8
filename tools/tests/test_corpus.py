"""The classifier against real SGLang failure excerpts from public reports (fixtures/corpus).

Each `NN-name.log` is quoted from the report named in `NN-name.yaml` (source_url), with the cause
(and OOM phase) the report settled on.
"""

from pathlib import Path

import pytest
import yaml

from sglnode.diagnose import diagnose_lines, numbered
from sglnode.rulebook import CAUSES, OOM_PHASES

CORPUS = Path(__file__).parent / "fixtures" / "corpus"
ITEMS = sorted(CORPUS.glob("*.yaml"))
MIN_CORPUS_ITEMS = 20  # issue 5: "at least 20"


def _load(meta_path: Path) -> tuple[dict, list[str]]:
    meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
    log = meta_path.with_suffix(".log").read_text(encoding="utf-8").splitlines()
    return meta, log


def test_corpus_is_large_enough_and_well_formed():
    assert len(ITEMS) >= MIN_CORPUS_ITEMS
    urls = set()
    for item in ITEMS:
        meta, log = _load(item)
        assert meta["source_url"].startswith("https://github.com/"), item.name
        assert meta["cause"] in CAUSES, item.name
        assert meta["phase"] in (*OOM_PHASES, None), item.name
        assert (meta["phase"] is not None) == (meta["cause"] == "oom"), item.name
        assert meta["settled"], item.name
        assert log, item.name
        urls.add(meta["source_url"])
    assert len(urls) == len(ITEMS), "each corpus item is a different report"


@pytest.mark.parametrize("item", ITEMS, ids=lambda path: path.stem)
def test_classifier_names_the_settled_cause(item):
    meta, log = _load(item)
    diagnosis = diagnose_lines(numbered(log, source=item.name))
    assert (diagnosis.cause, diagnosis.phase) == (meta["cause"], meta["phase"])
    if meta["cause"] != "unknown":
        assert diagnosis.evidence, "a named cause always comes with evidence lines"
        assert diagnosis.fix


def test_corpus_covers_every_cause_class_it_claims():
    causes = {_load(item)[0]["cause"] for item in ITEMS}
    required = {
        "oom",
        "nccl",
        "arch_unsupported",
        "port_in_use",
        "watchdog_timeout",
        "import_error",
        "cuda_graph_capture",
        "kernel_resources",
        "kv_transfer",
        "unknown",
    }
    assert required <= causes
