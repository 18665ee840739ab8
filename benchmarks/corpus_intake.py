"""Bring new real excerpts into the diagnosis corpus without leaking the held-out split.

    python benchmarks/corpus_intake.py split URL [URL ...]     # train or test, before reading a report
    python benchmarks/corpus_intake.py check STAGING_DIR       # format, duplicates, split of each item
    python benchmarks/corpus_intake.py score STAGING_DIR       # the current rules on the new items
    python benchmarks/corpus_intake.py merge STAGING_DIR       # number them and copy them in

A staging directory holds `<slug>.yaml` + `<slug>.log` pairs in the corpus's format (any slug; merge
numbers them). The held-out split stays the same set of reports: a URL that hashes to `test` is
refused (collectors run `split` on a URL before they read the report, and drop it when it says test),
as is a URL already in the corpus or a log that is a near-copy of one already there. `score` is the
fresh-data estimate: the rules as they stand, on reports they were not written from, so run it
before writing rules from the batch. It never looks at the corpus's test items, and `check` says only
"near-copy of a corpus item" for them, not which.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
from collections import Counter
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import diagnosis_accuracy as bench

from sglnode.diagnosis.rulebook import CAUSES, OOM_PHASES

REQUIRED_KEYS = ("source_url", "title", "library", "cause", "phase", "settled", "label_uncertain", "tags")
HEADER = "# Real excerpt from a public report; the .log next to this file is quoted from it.\n"
# Two logs are one report quoted twice when the shorter one is almost all in the longer one and they
# are of a size: a one-line item ("CUDA error: an illegal memory access was encountered") does not make
# every longer log that quotes the same line a copy.
NEAR_COPY_SHARE = 0.8
NEAR_COPY_SIZE_RATIO = 0.5
# .yamllint's line-length limit; `make lint` holds the corpus to it.
YAMLLINT_LINE_MAX = 160
YAMLLINT_LONG_LINE = "# yamllint disable-line rule:line-length\n"
NUMBER_RE = re.compile(r"^(\d+)-")
VOLATILE_RE = re.compile(r"0x[0-9a-f]+|\d+")


def normalised(lines: list[str]) -> set[str]:
    """Distinct non-blank lines with numbers and addresses blanked: timestamps, PIDs, sizes differ."""
    return {VOLATILE_RE.sub("#", line.strip()) for line in lines if line.strip()}


def near_copy(new: set[str], old: set[str]) -> bool:
    if not new or not old:
        return False
    shared = len(new & old)
    return (
        shared / min(len(new), len(old)) >= NEAR_COPY_SHARE
        and shared / max(len(new), len(old)) >= NEAR_COPY_SIZE_RATIO
    )


def staged(staging: Path) -> list[tuple[Path, object, list[str]]]:
    """Each staged pair; a yaml that does not parse, or files that are not UTF-8, come back as a
    problem string in place of the metadata (check refuses them, saying why)."""
    items: list[tuple[Path, object, list[str]]] = []
    for meta_path in sorted(staging.glob("*.yaml")):
        log_path = meta_path.with_suffix(".log")
        try:
            meta: object = yaml.safe_load(meta_path.read_text(encoding="utf-8"))
            lines = log_path.read_text(encoding="utf-8").splitlines() if log_path.exists() else []
        except (yaml.YAMLError, UnicodeDecodeError) as exc:
            meta, lines = f"unreadable: {type(exc).__name__}: {str(exc).splitlines()[0]}", []
        items.append((meta_path, meta, lines))
    return items


def problems(meta: object, lines: list[str]) -> list[str]:
    if isinstance(meta, str) and meta.startswith("unreadable: "):
        return [meta]
    if not isinstance(meta, dict):
        return ["the yaml is not a mapping"]
    found = [f"missing key {key}" for key in REQUIRED_KEYS if key not in meta]
    unknown = set(meta) - {*REQUIRED_KEYS, "sglang_version", "gpu", "split"}
    found += [f"unknown key {key}" for key in sorted(unknown)]
    url = str(meta.get("source_url", ""))
    if not url.startswith("https://"):
        found.append("source_url is not an https URL")
    if meta.get("cause") not in CAUSES:
        found.append(f"cause {meta.get('cause')!r} not one of {CAUSES}")
    phase = meta.get("phase")
    if (meta.get("cause") == "oom") != (phase is not None) or phase not in (*OOM_PHASES, None):
        found.append(f"phase {phase!r}: one of {OOM_PHASES} for oom, null otherwise")
    if not meta.get("settled") or not meta.get("library"):
        found.append("settled and library must say something")
    if not lines:
        found.append("the .log is missing or empty")
    return found


def check(staging: Path) -> tuple[list[tuple[Path, dict, list[str]]], list[str]]:
    """The staged items fit to merge, and a line per refused one."""
    corpus = bench.load_corpus()
    known_urls = {item.meta["source_url"] for item in corpus}
    known_logs = [(item.name, item.meta["split"], normalised(item.lines)) for item in corpus]
    accepted: list[tuple[Path, dict, list[str]]] = []
    refused = []
    seen_urls: set[str] = set()
    for meta_path, meta, lines in staged(staging):
        found = problems(meta, lines)
        url = str(meta.get("source_url", "")) if isinstance(meta, dict) else ""
        if url and bench.split_of(url) != "train":
            found.append("its URL hashes to the held-out test split: dropped unread")
        if url in known_urls or url in seen_urls:
            found.append("its URL is already in the corpus or the batch")
        new = normalised(lines)
        for name, split, old in known_logs:
            if near_copy(new, old):
                found.append(f"near-copy of {name if split == 'train' else 'a held-out corpus item'}")
                break
        for _, _, other_lines in accepted:
            if near_copy(new, normalised(other_lines)):
                found.append("near-copy of another staged item")
                break
        if found:
            refused.append(f"{meta_path.stem}: " + "; ".join(found))
            continue
        assert isinstance(meta, dict)  # problems() refused anything else
        seen_urls.add(url)
        accepted.append((meta_path, meta, lines))
    return accepted, refused


def as_items(accepted: list[tuple[Path, dict, list[str]]]) -> list[bench.Item]:
    return [bench.Item(path.stem, {**meta, "split": "train"}, lines) for path, meta, lines in accepted]


def score(accepted: list[tuple[Path, dict, list[str]]]) -> dict:
    return bench.score(as_items(accepted))


class IndentedDumper(yaml.SafeDumper):
    """Lists indented under their key, as the corpus (and yamllint) has them."""

    def increase_indent(self, flow: bool = False, indentless: bool = False) -> None:
        super().increase_indent(flow, False)


def within_line_length(text: str) -> str:
    """A line yaml cannot fold (a long URL has no space to break at) tells yamllint it is meant."""
    lines = []
    for line in text.splitlines(keepends=True):
        if len(line.rstrip("\n")) > YAMLLINT_LINE_MAX:
            lines.append(YAMLLINT_LONG_LINE)
        lines.append(line)
    return "".join(lines)


def merge(accepted: list[tuple[Path, dict, list[str]]]) -> list[Path]:
    numbers = [int(m.group(1)) for p in bench.CORPUS.glob("*.yaml") if (m := NUMBER_RE.match(p.name))]
    next_number = max(numbers, default=0) + 1
    written = []
    for offset, (meta_path, meta, _) in enumerate(accepted):
        slug = NUMBER_RE.sub("", meta_path.stem)
        target = bench.CORPUS / f"{next_number + offset}-{slug}.yaml"
        body = {
            key: meta.get(key) for key in (*REQUIRED_KEYS[:3], "sglang_version", "gpu", *REQUIRED_KEYS[3:])
        }
        body["split"] = "train"
        dumped = yaml.dump(body, Dumper=IndentedDumper, sort_keys=False, allow_unicode=True, width=100)
        target.write_text(HEADER + within_line_length(dumped), encoding="utf-8")
        shutil.copyfile(meta_path.with_suffix(".log"), target.with_suffix(".log"))
        written.append(target)
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    split = sub.add_parser("split", help="the split a URL falls in (read the report only if train)")
    split.add_argument("urls", nargs="+")
    for name in ("check", "score", "merge"):
        sub.add_parser(name).add_argument("staging", type=Path)
    args = parser.parse_args(argv)
    if args.command == "split":
        for url in args.urls:
            print(f"{bench.split_of(url)}\t{url}")
        return 0
    if not args.staging.is_dir():
        print(f"corpus_intake: {args.staging} is not a directory", file=sys.stderr)
        return 2
    accepted, refused = check(args.staging)
    for line in refused:
        print(f"refused {line}")
    print(f"{len(accepted)} accepted, {len(refused)} refused")
    if args.command == "merge" and refused:
        # A batch goes in whole or not at all: nothing is numbered in while part of it is refused.
        print("corpus_intake: nothing merged; fix or remove the refused items first", file=sys.stderr)
        return 1
    if args.command == "score" and accepted:
        result = score(accepted)
        print(
            f"fresh-data estimate: {result['right']}/{result['items']} = {result['accuracy']:.1%}, "
            f"false OOM {result['false_oom']}"
        )
        print(bench.format_matrix(result))
        labels = Counter(item.label for item in as_items(accepted))
        print("labels: " + ", ".join(f"{label} {n}" for label, n in labels.most_common()))
        for name, label, guess in result["misses"]:
            print(f"  miss {name}: label {label}, diagnosed {guess}")
    if args.command == "merge":
        for path in merge(accepted):
            print(f"merged {path.name}")
    return 1 if refused and args.command == "check" else 0


if __name__ == "__main__":
    sys.exit(main())
