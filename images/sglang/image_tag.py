#!/usr/bin/env python3
"""The sglang-sm120 image's tag, derived from everything the build reads. One algorithm, used by
`make image` (tools/setup/sglang-image.sh) and by the sglang_image role (on the node, in the staged
build context), so both name the same inputs with the same tag.

    image_tag.py CONTEXT --name NAME [--build-arg NAME=VALUE]... [--json]

NAME is the image repository (images.sglang in tools/sglnode/pins.yaml; the callers pass it).

Inputs hashed (sha256):
  - every file of the build context that the builder receives: the context's .dockerignore is "*"
    followed by "!pattern" lines, and exactly the files those patterns admit are hashed (Dockerfile
    too), by relative path and content; a flash-attn wheel in wheelhouse/ is one of them;
  - every ARG of the Dockerfile, with its value: the --build-arg given, else the Dockerfile's
    default. So passing a default explicitly gives the same tag as leaving it out. An ARG declared
    without a default (the pinned ones: tools/sglnode/pins.yaml) must be given. Args that only
    label the image (LABEL_ONLY_ARGS) or only pace a build (MAX_JOBS) are left out.
The base image enters by its reference (BASE_IMAGE): pin a digest (name@sha256:...) to make a base
that is re-pushed under the same name a new input.

Tag: <sglang>-cu<MM>-torch<torch>-<first 12 hex of the digest>, versions read from the lock (sglang,
torch, cuda-toolkit). Printed as NAME:TAG; --json prints the tag, the digest, the hashed inputs and
the label-only build args the build must pass (versions and the digest).
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import re
import sys
from pathlib import Path

LOCK = "requirements.lock"
# Build args that never change what is in the image: labels, and nvcc parallelism.
LABEL_ONLY_ARGS = frozenset(
    {"SGLANG_VERSION", "TORCH_VERSION", "CUDA_VERSION", "INPUTS_DIGEST", "IMAGE_REVISION", "MAX_JOBS"}
)
DIGEST_CHARS_IN_TAG = 12
ARG_LINE = re.compile(r"^ARG\s+([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$")
EXIT_USAGE = 64


def context_files(context: Path) -> list[Path]:
    """Files the builder receives: those a whitelist .dockerignore admits, plus the Dockerfile."""
    ignore = context / ".dockerignore"
    lines = [line.strip() for line in ignore.read_text().splitlines()] if ignore.is_file() else []
    patterns = [line for line in lines if line and not line.startswith("#")]
    if not patterns or patterns[0] != "*" or any(not p.startswith("!") for p in patterns[1:]):
        raise SystemExit(f"{ignore}: expected '*' then '!pattern' lines only (a whitelist)")
    admitted = [p[1:].rstrip("/") for p in patterns[1:]]
    files = []
    for path in sorted(context.rglob("*")):
        relative = path.relative_to(context).as_posix()
        if path.is_file() and (
            relative == "Dockerfile"
            or any(fnmatch.fnmatchcase(relative, p) or relative.startswith(p + "/") for p in admitted)
        ):
            files.append(path)
    return files


def dockerfile_args(dockerfile: Path) -> dict[str, str | None]:
    """ARG defaults (None: declared without one), first declaration wins (later stages re-declare)."""
    args: dict[str, str | None] = {}
    for line in dockerfile.read_text().splitlines():
        match = ARG_LINE.match(line.strip())
        if match and match.group(1) not in args:
            default = match.group(2)
            args[match.group(1)] = None if default is None else default.strip().strip('"')
    return args


def lock_versions(lock: Path) -> dict[str, str]:
    pins = dict(re.findall(r"^([A-Za-z0-9._-]+)==([^\s\\;]+)", lock.read_text(), flags=re.MULTILINE))
    try:
        cuda = pins["cuda-toolkit"].split(".")
        return {
            "SGLANG_VERSION": pins["sglang"],
            "TORCH_VERSION": pins["torch"],
            "CUDA_VERSION": ".".join(cuda[:3]),
        }
    except KeyError as missing:
        raise SystemExit(f"{lock}: no pin for {missing}") from None


def describe(context: Path, build_args: dict[str, str], name: str) -> dict[str, object]:
    declared = dockerfile_args(context / "Dockerfile")
    unknown = sorted(set(build_args) - set(declared))
    if unknown:
        raise SystemExit(f"build args not declared in {context / 'Dockerfile'}: {', '.join(unknown)}")
    missing = sorted(key for key, default in declared.items() if default is None and key not in build_args)
    if missing:
        raise SystemExit(
            f"build args without a default in {context / 'Dockerfile'} must be given: {', '.join(missing)}"
            " (tools/sglnode/pins.yaml has their values)"
        )
    resolved = {key: build_args.get(key, default) or "" for key, default in declared.items()}
    content_args = {key: value for key, value in sorted(resolved.items()) if key not in LABEL_ONLY_ARGS}
    files = {
        path.relative_to(context).as_posix(): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in context_files(context)
    }
    digest = hashlib.sha256(
        json.dumps({"args": content_args, "files": files}, sort_keys=True).encode()
    ).hexdigest()
    versions = lock_versions(context / LOCK)
    cuda_tag = "cu" + "".join(versions["CUDA_VERSION"].split(".")[:2])
    versions_part = f"{versions['SGLANG_VERSION']}-{cuda_tag}-torch{versions['TORCH_VERSION']}"
    tag = f"{versions_part}-{digest[:DIGEST_CHARS_IN_TAG]}"
    return {
        "ref": f"{name}:{tag}",
        "name": name,
        "tag": tag,
        "digest": digest,
        "args": content_args,
        "files": files,
        "label_args": {**versions, "INPUTS_DIGEST": digest},
    }


def parse_build_arg(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("context", type=Path)
    parser.add_argument("--name", required=True, help="image repository (images.sglang of the pins)")
    parser.add_argument("--build-arg", type=parse_build_arg, action="append", default=[])
    parser.add_argument("--json", action="store_true")
    try:
        options = parser.parse_args(argv)
    except SystemExit as error:
        return EXIT_USAGE if error.code else 0
    result = describe(options.context, dict(options.build_arg), options.name)
    print(json.dumps(result, indent=2, sort_keys=True) if options.json else result["ref"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
