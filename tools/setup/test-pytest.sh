#!/usr/bin/env bash
# make test's pytest stage: the sglang image build (minutes of downloads and unpacking, little CPU)
# runs while every test that does not need the image runs; the image's own tests run once it is
# built. Each part prints its [timing] line; the exit code is non-zero if any part failed.
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
stage="$repo_root/tools/setup/stage.sh"
mkdir -p .cache
image_log=.cache/sglang-image-build.log

"$stage" "image: sglang-sm120 (in the background)" bash tools/setup/sglang-image.sh >"$image_log" 2>&1 &
image_pid=$!
# Ctrl-C or a kill of make ends the build too, never leaving it running on its own.
trap 'kill "$image_pid" 2>/dev/null; wait "$image_pid" 2>/dev/null; exit 130' INT TERM

rc=0
SGLNODE_FORBID_SKIPS=1 "$stage" "pytest: everything but the image's tests" \
  pytest -p no:cacheprovider -m "not sglang_image" || rc=1

wait "$image_pid"
image_rc=$?
grep -E '^\[(timing|sglang-image)\]' "$image_log"
if [ "$image_rc" -ne 0 ]; then
  echo "---- last 60 lines of $image_log ----"
  tail -60 "$image_log"
  exit 1
fi
SGLNODE_FORBID_SKIPS=1 "$stage" "pytest: the sglang image's tests" \
  pytest -p no:cacheprovider -m sglang_image || rc=1
exit "$rc"
