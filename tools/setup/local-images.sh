#!/usr/bin/env bash
# Service images the simulated node runs, built locally (no registry): the real sglang-router and
# the simulator (`sglnode sim`, a test double of SGLang). Each build script skips a present,
# up-to-date tag.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
for image in router sim; do
  printf '[local-images] %s: ' "$image"
  bash "$repo_root/images/$image/build.sh" 2>&1 | tail -1
done
