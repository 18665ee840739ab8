"""A blind second reading of the corpus's labels, and an unattributed adjudication of where it differs.

    python benchmarks/label_audit.py prepare --split test --out DIR --key KEY [--chunks N] [--seed S]
    python benchmarks/label_audit.py compare --key KEY --blind DIR [--cases DIR2 --cases-key KEY2 --groups K]
    python benchmarks/label_audit.py apply --key KEY --round KEY2 DIR2 [--round KEY3 DIR3] [--date D]

The protocol is docs/corpus-labels.md's. `prepare` copies the split's logs, renumbered at random (a
corpus file name says its label), into DIR/chunkN/items/ with the label convention beside them; the
mapping goes to KEY (mode 0600), which annotators are told not to read. Each annotator writes
DIR/chunkN/blind.json: {"item001": {"cause": ..., "phase": ..., "confident": ...}, ...}. `compare`
prints how often the blind reading agrees with the corpus (counts only, no item), and with --cases
lays out each disagreement for an adjudication round: the excerpt and the two labels as options A and
B in random order, not saying which is the corpus's (run it once per round, with another --seed). Each
adjudicator writes DIR2/groupK/verdicts.json: {"c001": {"pick": "A" | "B" | "neither"}, ...}. `apply`
relabels where every round picked the blind reading, marks the rest that no round kept as they were
`label_uncertain: true`, and says so in `settled`.

Nobody who writes rules runs an annotator's part, and nothing here prints an excerpt or a test label.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
from collections import Counter
from collections.abc import Callable
from datetime import date
from pathlib import Path

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
import corpus_intake as intake
import diagnosis_accuracy as bench

from sglnode.diagnosis.rulebook import CAUSES, OOM_PHASES

CONVENTION = bench.REPO / "docs" / "corpus-labels.md"
# the annotators get the label definitions, not the protocol that checks them
PROTOCOL_HEADING = "## Label audit of the held-out split"


class AuditError(ValueError):
    """An annotator's or adjudicator's file does not fit the audit."""


def label_of(reading: dict) -> str:
    return f"{reading['cause']}({reading['phase']})" if reading.get("phase") else str(reading["cause"])


def valid_reading(reading: object) -> bool:
    if not isinstance(reading, dict) or reading.get("cause") not in CAUSES:
        return False
    phase = reading.get("phase")
    return (reading["cause"] == "oom") == (phase is not None) and phase in (*OOM_PHASES, None)


def write_private(path: Path, data: dict) -> None:
    """A key the annotators must not read: created 0600, never readable by others for a moment."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.fchmod(descriptor, 0o600)  # (a key file that was there before keeps no wider mode)
    with os.fdopen(descriptor, "w", encoding="utf-8") as key_file:
        key_file.write(json.dumps(data, indent=1))


def hand_out_convention(folders: list[Path]) -> None:
    """The label definitions beside each folder of excerpts (not the protocol that checks them)."""
    text = CONVENTION.read_text(encoding="utf-8").split(PROTOCOL_HEADING)[0]
    for folder in folders:
        (folder / "CONVENTIONS.md").write_text(text, encoding="utf-8")


def prepare(split: str, out: Path, key_path: Path, chunks: int, seed: int) -> dict:
    items = [item for item in bench.load_corpus() if item.meta["split"] == split]
    random.Random(seed).shuffle(items)
    width = len(str(len(items)))
    key = {}
    for index, item in enumerate(items):
        chunk = index % chunks + 1
        anonymous = f"item{index + 1:0{width}d}"
        folder = out / f"chunk{chunk}" / "items"
        folder.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(bench.CORPUS / f"{item.name}.log", folder / f"{anonymous}.log")
        key[anonymous] = {"name": item.name, "label": item.label, "chunk": chunk}
    hand_out_convention([out / f"chunk{chunk}" for chunk in range(1, chunks + 1)])
    write_private(key_path, key)
    return key


def answers(
    folder: Path, pattern: str, expected: dict, valid: Callable[[object], bool]
) -> tuple[dict, int, int]:
    """Every answer file's entries merged (an annotator's blind.json, an adjudicator's verdicts.json),
    with how many expected entries are missing and how many are not a valid answer."""
    merged: dict = {}
    for path in sorted(folder.glob(pattern)):
        merged.update(json.loads(path.read_text(encoding="utf-8")))
    missing = len(set(expected) - set(merged))
    bad = sum(1 for key in expected if key in merged and not valid(merged[key]))
    return merged, missing, bad


def blind_readings(blind_dir: Path, key: dict) -> dict:
    readings, missing, bad = answers(blind_dir, "chunk*/blind.json", key, valid_reading)
    if missing or bad:
        raise AuditError(f"blind readings: {missing} items missing, {bad} not a valid label")
    return readings


def agreement(key: dict, readings: dict) -> dict:
    agree = [item for item in key if label_of(readings[item]) == key[item]["label"]]
    confident = [item for item in key if readings[item].get("confident")]
    return {
        "items": len(key),
        "agree": len(agree),
        "agree_cause": sum(1 for item in key if readings[item]["cause"] == key[item]["label"].split("(")[0]),
        "confident": len(confident),
        "confident_agree": len(set(confident) & set(agree)),
        "pairs": Counter((key[item]["label"], label_of(readings[item])) for item in key if item not in agree),
    }


def lay_out_cases(
    key: dict,
    readings: dict,
    blind_dir: Path,
    cases_dir: Path,
    cases_key_path: Path,
    *,
    groups: int,
    seed: int,
) -> dict:
    rng = random.Random(seed)
    differing = [item for item in key if label_of(readings[item]) != key[item]["label"]]
    rng.shuffle(differing)
    cases = {}
    for index, item in enumerate(differing):
        group = index % groups + 1
        folder = cases_dir / f"group{group}"
        (folder / "cases").mkdir(parents=True, exist_ok=True)
        case = f"c{index + 1:03d}"
        source = blind_dir / f"chunk{key[item]['chunk']}" / "items" / f"{item}.log"
        shutil.copyfile(source, folder / "cases" / f"{case}.log")
        options = [key[item]["label"], label_of(readings[item])]
        rng.shuffle(options)
        cases[case] = {"item": item, "group": group, "options": options}
        with (folder / "OPTIONS.txt").open("a", encoding="utf-8") as listing:
            listing.write(f"{case}: option A = {options[0]}   option B = {options[1]}\n")
    hand_out_convention([cases_dir / f"group{group}" for group in range(1, groups + 1)])
    write_private(cases_key_path, cases)
    return cases


def verdicts_of(verdicts_dir: Path, cases: dict) -> dict:
    picks, missing, bad = answers(
        verdicts_dir,
        "group*/verdicts.json",
        cases,
        lambda verdict: isinstance(verdict, dict) and verdict.get("pick") in ("A", "B", "neither"),
    )
    if missing or bad:
        raise AuditError(f"verdicts: {missing} cases missing, {bad} not A, B or neither")
    return picks


def relabelled(meta: dict, outcome: str, old: str, new: str, day: str) -> dict:
    """The item's metadata after the audit: `outcome` is "relabelled" (every adjudicator picked the
    blind reading) or "questioned" (they split, or one found neither clearly right)."""
    meta = dict(meta)
    if outcome == "relabelled":
        cause, _, phase = new.partition("(")
        meta["cause"], meta["phase"] = cause, (phase.rstrip(")") or None)
        note = (
            f"Label audit {day} (docs/corpus-labels.md): a blind annotator read {new} and both adjudicators,"
            f" shown both readings unattributed, agreed; the label was {old}."
        )
    else:
        note = (
            f"Label audit {day} (docs/corpus-labels.md): a blind annotator read {new}; the adjudicators did"
            f" not both side with either reading, so {old} is kept."
        )
    meta["settled"] = f"{str(meta['settled']).rstrip()} {note}"
    meta["label_uncertain"] = True
    return meta


def chosen_labels(rounds: list[tuple[dict, dict]]) -> dict[str, list[str | None]]:
    """Per audited item, the label each adjudication round picked (None: neither)."""
    chosen: dict[str, list[str | None]] = {}
    for cases, picks in rounds:
        for case, laid in cases.items():
            pick = picks[case]["pick"]
            label = None if pick == "neither" else laid["options"][0 if pick == "A" else 1]
            chosen.setdefault(laid["item"], []).append(label)
    return chosen


def apply(key: dict, rounds: list[tuple[dict, dict]], day: str) -> Counter:
    """Relabel where every round picked the blind reading; mark uncertain where they did not agree.
    Every new file is made before the first is written: a bad item leaves the corpus as it was."""
    audited = [{laid["item"] for laid in cases.values()} for cases, _ in rounds]
    if any(items != audited[0] for items in audited):
        raise AuditError("the adjudication rounds did not judge the same items")
    options = {laid["item"]: laid["options"] for laid in rounds[0][0].values()}
    outcomes: Counter = Counter()
    writes = []
    for item, labels in chosen_labels(rounds).items():
        entry = key[item]
        old = entry["label"]
        new = next(option for option in options[item] if option != old)
        if all(label == old for label in labels):
            outcomes["kept"] += 1
            continue
        outcome = "relabelled" if all(label == new for label in labels) else "questioned"
        path = bench.CORPUS / f"{entry['name']}.yaml"
        meta = yaml.safe_load(path.read_text(encoding="utf-8"))
        dumped = yaml.dump(
            relabelled(meta, outcome, old, new, day),
            Dumper=intake.IndentedDumper,
            sort_keys=False,
            allow_unicode=True,
            width=100,
        )
        writes.append((path, intake.HEADER + intake.within_line_length(dumped)))
        outcomes[outcome] += 1
    for path, text in writes:
        path.write_text(text, encoding="utf-8")
    return outcomes


def load_key(path: Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    prep = sub.add_parser("prepare", help="anonymised copies of a split's logs for blind annotators")
    prep.add_argument("--split", choices=("test", "train"), required=True)
    prep.add_argument("--out", type=Path, required=True)
    prep.add_argument("--key", type=Path, required=True)
    prep.add_argument("--chunks", type=int, default=1)
    prep.add_argument("--seed", type=int, default=20261202)
    cmp_ = sub.add_parser("compare", help="agreement counts; with --cases, the adjudicators' cases")
    cmp_.add_argument("--key", type=Path, required=True)
    cmp_.add_argument("--blind", type=Path, required=True)
    cmp_.add_argument("--cases", type=Path)
    cmp_.add_argument("--cases-key", type=Path)
    cmp_.add_argument("--groups", type=int, default=1)
    cmp_.add_argument("--seed", type=int, default=11)
    app = sub.add_parser("apply", help="relabel the corpus from the adjudicators' verdicts")
    app.add_argument("--key", type=Path, required=True)
    app.add_argument(
        "--round",
        nargs=2,
        action="append",
        required=True,
        type=Path,
        metavar=("CASES_KEY", "VERDICTS_DIR"),
        help="one adjudication round: its cases key and the folder of its verdicts (repeat per round)",
    )
    app.add_argument("--date", default=date.today().isoformat())
    args = parser.parse_args(argv)
    try:
        if args.command == "prepare":
            if args.chunks < 1:
                raise AuditError("--chunks must be at least 1")
            key = prepare(args.split, args.out, args.key, args.chunks, args.seed)
            print(
                f"{len(key)} {args.split} items in {args.chunks} chunk(s) under {args.out}; key: {args.key}"
            )
        elif args.command == "compare":
            key = load_key(args.key)
            readings = blind_readings(args.blind, key)
            figures = agreement(key, readings)
            print(
                f"blind reading agrees with the corpus on {figures['agree']}/{figures['items']}"
                f" ({figures['agree'] / figures['items']:.1%}); on the cause alone {figures['agree_cause']};"
                f" where the annotator was confident {figures['confident_agree']}/{figures['confident']}"
            )
            for (corpus_label, blind_label), count in figures["pairs"].most_common():
                print(f"  {count:3d}  corpus {corpus_label:<22} blind {blind_label}")
            if args.cases:
                if args.cases_key is None or args.groups < 1:
                    raise AuditError("--cases needs --cases-key and --groups >= 1")
                cases = lay_out_cases(
                    key, readings, args.blind, args.cases, args.cases_key, groups=args.groups, seed=args.seed
                )
                print(f"{len(cases)} cases for {args.groups} adjudicator(s) under {args.cases}")
        else:
            rounds = []
            for cases_key, verdicts_dir in args.round:
                cases = load_key(cases_key)
                rounds.append((cases, verdicts_of(verdicts_dir, cases)))
            outcomes = apply(load_key(args.key), rounds, args.date)
            print(
                f"relabelled {outcomes['relabelled']}, questioned (label kept, marked uncertain)"
                f" {outcomes['questioned']}, kept {outcomes['kept']}"
            )
    except (AuditError, OSError, json.JSONDecodeError, KeyError) as exc:
        print(f"label_audit: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
