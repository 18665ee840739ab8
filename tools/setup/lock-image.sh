#!/usr/bin/env bash
# The one command that makes images/sglang/requirements.lock, the image's only list of Python packages:
#
#   tools/setup/lock-image.sh           set the pinned lines of requirements.in from the pins, resolve it
#                                       and write the lock
#   tools/setup/lock-image.sh --check   exit 1 if requirements.in does not carry the pins, or the
#                                       committed lock is not what the inputs resolve to today (a new
#                                       release of an unpinned dependency shows up here)
#
# The versions of requirements.in's pinned lines come from tools/sglnode/pins.yaml: this script
# rewrites them first (`python3 tools/sglnode/pins.py sync`), so a bump is one line in the pins file.
#
# Every package is pinned with the sha256 of each of its files on PyPI, and only wheels are allowed
# (--only-binary :all:), so the image build never compiles a dependency and never picks a version.
#
# One lock for both bases. The image's Python is the base's own python3: 3.11 on the local Debian 12
# base, 3.12 on NVIDIA's Ubuntu 24.04 CUDA image (the node's default). The lock is resolved for the
# oldest (3.11), then resolved again for every other version with the lock as constraints; a version
# for which a pin has no wheel or no solution fails here, not in an image build. The hashes cover
# every file of each pinned release, so pip verifies whichever cp311/cp312 wheel it picks.
# The supported versions are written into the lock's header; the Dockerfile refuses any other Python.
#
# Env: UV (default the repo's .venv/bin/uv, pinned in requirements/toolchain.txt).
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
uv="${UV:-$repo_root/.venv/bin/uv}"
# Relative paths: uv writes them into the lock's "via" comments, which must not name this machine.
cd "$repo_root"
inputs=images/sglang/requirements.in
overrides=images/sglang/requirements.overrides
lock=images/sglang/requirements.lock
# Debian 12's python3 first (the resolution), then Ubuntu 24.04's (verified against it).
readonly PYTHON_VERSIONS=(3.11 3.12)
# glibc 2.36 is Debian 12's, the older of the two bases: wheels that need a newer glibc are refused.
readonly PLATFORM=x86_64-manylinux_2_36
readonly COMMAND="tools/setup/lock-image.sh"

check=0
case "${1:-}" in
  "") ;;
  --check) check=1 ;;
  *)
    echo "usage: $0 [--check]" >&2
    exit 64
    ;;
esac
[[ -x "$uv" ]] || { echo "lock-image: $uv not found; run make setup (uv is in requirements/toolchain.txt)" >&2; exit 2; }

python="$repo_root/.venv/bin/python"
[[ -x "$python" ]] || python=python3
if ((check)); then
  "$python" tools/sglnode/pins.py sync --check || exit 1
else
  "$python" tools/sglnode/pins.py sync
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT

compile() {
  local python_version="$1" out="$2"
  shift 2
  # The machine's pip configuration (extra indexes, find-links) is not uv's: only PyPI is asked.
  "$uv" pip compile "$inputs" --quiet \
    --python-version "$python_version" --python-platform "$PLATFORM" \
    --only-binary :all: --generate-hashes --overrides "$overrides" \
    --index-url https://pypi.org/simple --no-header "$@" -o "$out"
}

pins() { grep -E '^[A-Za-z0-9]' "$1" | sed 's/ .*//' | sort; }

compile "${PYTHON_VERSIONS[0]}" "$work/resolved.txt"
for version in "${PYTHON_VERSIONS[@]:1}"; do
  if ! compile "$version" "$work/check-$version.txt" --constraints "$work/resolved.txt"; then
    echo "lock-image: the pins resolved for Python ${PYTHON_VERSIONS[0]} do not install on Python $version" >&2
    exit 1
  fi
  if ! diff <(pins "$work/resolved.txt") <(pins "$work/check-$version.txt") >"$work/diff.txt"; then
    echo "lock-image: Python $version needs other packages than Python ${PYTHON_VERSIONS[0]}:" >&2
    cat "$work/diff.txt" >&2
    exit 1
  fi
done

{
  echo "# images/sglang/requirements.lock: made by \`$COMMAND\` from images/sglang/requirements.in"
  echo "# and images/sglang/requirements.overrides. Do not edit; change the inputs and run it again."
  echo "# Installed by images/sglang/Dockerfile with pip --require-hashes --no-deps --only-binary :all:."
  echo "# python-versions: ${PYTHON_VERSIONS[*]}"
  echo "# platform: $PLATFORM"
  cat "$work/resolved.txt"
} >"$work/lock"

if ((check)); then
  if ! diff -u "$lock" "$work/lock" >"$work/lock.diff"; then
    echo "lock-image: $lock is stale; run $COMMAND" >&2
    head -40 "$work/lock.diff" >&2
    exit 1
  fi
  echo "lock-image: $lock is current ($(pins "$lock" | wc -l) packages)"
  exit 0
fi
mv "$work/lock" "$lock"
echo "lock-image: wrote $lock ($(pins "$lock" | wc -l) packages, Python ${PYTHON_VERSIONS[*]})"
