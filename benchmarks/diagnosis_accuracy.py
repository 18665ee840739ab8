"""How well `sglnode diagnose` names the cause of real crashes it was not tuned on.

    python benchmarks/diagnosis_accuracy.py [--split test|train|all] [--misses] [--json]

The corpus (tools/tests/fixtures/corpus/) holds real excerpts from public reports, each labelled
with the cause (and OOM phase) the excerpt itself shows, and a fixed split: an item is in `test`
when sha256(source_url) mod 100 < 30, else `train`. Rules are developed on `train`; `test` is only
scored. A diagnosis counts as right when cause and (for OOM) phase both match. "False OOM" counts
logs whose label is not OOM but that were diagnosed OOM: the one mistake that sends an operator to
the wrong fix. `--misses` lists wrong items of the train split only (never the test split's).

tools/tests/test_corpus.py fails `make test` when the test split falls below the recorded figures
(benchmarks/diagnosis_baseline.json: accuracy, false OOMs, and how many times the test split has been
scored while the rules were developed, since every look at it leaks a little); update that file only
with a better measured result, and count the evaluation.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import signal
import sys
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import yaml

from sglnode.diagnosis.diagnose import diagnose_lines, numbered

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "tools" / "tests" / "fixtures" / "corpus"
BASELINE = Path(__file__).resolve().parent / "diagnosis_baseline.json"
TEST_PERCENT = 30


def split_of(source_url: str) -> str:
    """The fixed split rule; tools/tests/test_corpus.py checks every item follows it."""
    return (
        "test"
        if int(hashlib.sha256(source_url.encode()).hexdigest()[:8], 16) % 100 < TEST_PERCENT
        else "train"
    )


@dataclass(frozen=True)
class Item:
    name: str
    meta: dict
    lines: list[str]

    @property
    def label(self) -> str:
        return f"{self.meta['cause']}({self.meta['phase']})" if self.meta["phase"] else self.meta["cause"]


def load_corpus() -> list[Item]:
    items = []
    for meta_path in sorted(CORPUS.glob("*.yaml")):
        meta = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
        lines = meta_path.with_suffix(".log").read_text(encoding="utf-8").splitlines()
        items.append(Item(meta_path.stem, meta, lines))
    return items


def predicted(item: Item) -> str:
    diagnosis = diagnose_lines(numbered(item.lines, source=item.name))
    return f"{diagnosis.cause}({diagnosis.phase})" if diagnosis.phase else diagnosis.cause


def score(items: list[Item]) -> dict:
    rows = [(item, predicted(item)) for item in items]
    right = sum(1 for item, guess in rows if guess == item.label)
    false_oom = [item.name for item, guess in rows if guess.startswith("oom") and item.meta["cause"] != "oom"]
    confusion = Counter((item.label, guess) for item, guess in rows)
    return {
        "items": len(rows),
        "right": right,
        "accuracy": round(right / len(rows), 4) if rows else 0.0,
        "false_oom": len(false_oom),
        "false_oom_items": false_oom,
        "confusion": {f"{label} -> {guess}": n for (label, guess), n in sorted(confusion.items())},
        "misses": [(item.name, item.label, guess) for item, guess in rows if guess != item.label],
    }


def format_matrix(result: dict) -> str:
    labels = sorted(
        {key.split(" -> ")[0] for key in result["confusion"]}
        | {key.split(" -> ")[1] for key in result["confusion"]}
    )
    width = max(len(label) for label in labels)
    lines = [" " * width + " | " + " ".join(f"{i:>3}" for i in range(len(labels)))]
    for row, label in enumerate(labels):
        counts = [result["confusion"].get(f"{label} -> {other}", 0) for other in labels]
        lines.append(
            f"{label:>{width}} | " + " ".join(f"{n:>3}" if n else "  ." for n in counts) + f"   [{row}]"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--split", choices=("test", "train", "all"), default="test")
    parser.add_argument("--misses", action="store_true", help="list the train split's wrong items")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    items = load_corpus()
    chosen = [item for item in items if args.split == "all" or item.meta["split"] == args.split]
    result = score(chosen)
    if args.split != "train":
        result.pop("misses")  # the test split is scored, never inspected item by item
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    print(f"corpus: {len(items)} real excerpts; split {args.split}: {result['items']} items")
    print(f"accuracy (cause and OOM phase): {result['right']}/{result['items']} = {result['accuracy']:.1%}")
    print(f"false OOM (non-OOM logs diagnosed as OOM): {result['false_oom']}")
    print("confusion matrix (rows: label, columns: diagnosis, numbered as the rows):")
    print(format_matrix(result))
    if args.misses and args.split == "train":
        for name, label, guess in result["misses"]:
            print(f"  miss {name}: label {label}, diagnosed {guess}")
    return 0


if __name__ == "__main__":
    # `| head` closing the pipe ends the listing quietly, not with a traceback.
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
