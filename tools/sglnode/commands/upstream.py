"""`sglnode upstream`: the pinned SGLang as the oracle (fetch, check, refresh, diff).

    sglnode upstream fetch              download the hash-pinned wheels into .cache/upstream/
    sglnode upstream check              do our copies of SGLang's strings match the pinned wheel?
    sglnode upstream refresh            rewrite the strings catalogue from the pinned wheel
    sglnode upstream diff OLD NEW       what changed between two SGLang releases, and what here uses it

Exit codes: 0 ok / no drift, 1 drift found (check), 64 bad input, 69 a wheel could not be had.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from sglnode.exitcodes import EXIT_FAILED, EXIT_OK, EXIT_USAGE
from sglnode.upstream import catalog
from sglnode.upstream.diff import diff_releases, format_diff
from sglnode.upstream.wheels import WheelError, WheelSource, pinned_wheel, pins, release_wheel, sha256_of

EXIT_UNAVAILABLE = 69  # BSD sysexits' EX_UNAVAILABLE: PyPI or the cache could not provide a wheel


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "upstream",
        help="check this repo's copies of SGLang's strings, flags and defaults against the pinned wheel",
        description=__doc__.split("\n\n")[0] if __doc__ else None,
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", required=True)
    fetch = verbs.add_parser("fetch", help="download the hash-pinned upstream wheels (idempotent)")
    fetch.set_defaults(func=run_fetch)
    for name, helptext, func in (
        ("check", "compare the strings catalogue with the pinned wheel (exit 1 on drift)", run_check),
        ("refresh", "regenerate the strings catalogue from the pinned wheel", run_refresh),
    ):
        verb = verbs.add_parser(name, help=helptext)
        verb.add_argument(
            "--source", type=Path, help="a wheel file or an unpacked source tree instead of the pinned wheel"
        )
        verb.set_defaults(func=func)
    diff = verbs.add_parser("diff", help="compare two SGLang releases: flags, strings, memory defaults")
    diff.add_argument("old", help="older version (e.g. 0.5.22) or a wheel/source path")
    diff.add_argument("new", help="newer version (e.g. the pinned one) or a wheel/source path")
    diff.add_argument("--json", action="store_true", help="print the comparison as JSON")
    diff.set_defaults(func=run_diff)


def _source(path: Path | None) -> WheelSource:
    return WheelSource(path if path is not None else pinned_wheel("sglang"))


def run_fetch(args: argparse.Namespace) -> int:
    try:
        for project in pins():
            path = pinned_wheel(project)
            print(f"{project}: {path} (sha256 {sha256_of(path)[:16]}..., as pinned)")
    except WheelError as exc:
        print(f"sglnode upstream fetch: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    return EXIT_OK


def run_check(args: argparse.Namespace) -> int:
    try:
        source = _source(args.source)
    except WheelError as exc:
        print(f"sglnode upstream check: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    with source:
        drifts = catalog.check(list(catalog.load().values()), source.read)
    if not drifts:
        print(f"{len(catalog.load())} strings match {source.path.name}")
        return EXIT_OK
    for drift in drifts:
        print(drift.describe())
    print(f"{len(drifts)} of {len(catalog.load())} strings differ from {source.path.name}", file=sys.stderr)
    return EXIT_FAILED


def run_refresh(args: argparse.Namespace) -> int:
    try:
        source = _source(args.source)
    except WheelError as exc:
        print(f"sglnode upstream refresh: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    path = catalog.catalog_path()
    version, entries = catalog.parse(path.read_text(encoding="utf-8"))
    with source:
        try:
            text = catalog.dump(version, entries, source.read)
        except (LookupError, FileNotFoundError) as exc:
            print(f"sglnode upstream refresh: {exc}; fix that entry's file/contains first", file=sys.stderr)
            return EXIT_FAILED
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path} from {source.path.name}")
    return EXIT_OK


def _release(spec: str) -> WheelSource:
    path = Path(spec)
    if path.exists():
        return WheelSource(path)
    return WheelSource(release_wheel("sglang", spec))


def run_diff(args: argparse.Namespace) -> int:
    try:
        old, new = _release(args.old), _release(args.new)
    except WheelError as exc:
        print(f"sglnode upstream diff: {exc}", file=sys.stderr)
        return EXIT_UNAVAILABLE
    with old, new:
        report = diff_releases(old, new)
    print(json.dumps(report, indent=2) if args.json else format_diff(report))
    return EXIT_OK


__all__ = ["EXIT_FAILED", "EXIT_UNAVAILABLE", "EXIT_USAGE", "register"]
