#!/usr/bin/env bash
# Builds <images.sim>:<sglnode version> (a TEST DOUBLE of the SGLang server) with the classic builder;
# the repository, the version and the simulated SGLang's version come from tools/sglnode/pins.yaml.
#
#   images/sim/build.sh            build unless the tag exists and was built from the same sources
#   FORCE=1 images/sim/build.sh    rebuild anyway
#
# Env: SGLNODE_EXTRA_CA (CA bundle pip must trust; default the host's
# /etc/ssl/certs/ca-certificates.crt, which carries any TLS-intercepting proxy's CA),
# SIM_IMAGE (default the pinned images.sim), BASE_IMAGE (default sglnode/debian:bookworm), PYTHON (the
# interpreter that builds the sglnode wheel; default the repo's .venv, else python3).
# The wheel (dist/) and the CA (extra-ca.crt) are staged in the context, git-ignored, used only in
# the builder stage, and removed again when this script exits.
set -euo pipefail

# shellcheck source=images/build-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../build-lib.sh"

context="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${context}/../.." && pwd)"
python="${PYTHON:-${repo_root}/.venv/bin/python}"
[[ -x "$python" ]] || python=python3
version="$(pin sglnode)"
sglang_version="$(pin sglang)"
image="${SIM_IMAGE:-$(pin images.sim)}"
base_image="${BASE_IMAGE:-sglnode/debian:bookworm}"
tag="${image}:${version}"

# The version alone does not change with every edit; the label records which sources went in.
source_hash="$(sources_hash tools/sglnode pyproject.toml images/sim images/build-lib.sh)"

if [[ "${FORCE:-0}" != 1 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
  built_from="$(docker image inspect --format '{{ index .Config.Labels "io.sglnode.source-hash" }}' "$tag")"
  if [[ "$built_from" == "$source_hash" ]]; then
    echo "${tag} exists (sources ${source_hash}); skipping build (FORCE=1 rebuilds)"
    exit 0
  fi
  echo "${tag} was built from other sources (${built_from}); rebuilding"
fi

staged_ca="${context}/extra-ca.crt"
dist="${context}/dist"
trap 'rm -rf "$staged_ca" "$dist"' EXIT
stage_extra_ca "$staged_ca"

rm -rf "$dist"
"$python" -m pip wheel --quiet --no-deps --wheel-dir "$dist" "$repo_root"

# DOCKER_BUILDKIT=0: hosts without buildx (Docker 20.10 engines, CI) must build it too.
DOCKER_BUILDKIT=0 docker build \
  --build-arg "BASE_IMAGE=${base_image}" \
  --build-arg "SGLNODE_VERSION=${version}" \
  --build-arg "SGLANG_VERSION=${sglang_version}" \
  --build-arg "SGLNODE_SOURCE_HASH=${source_hash}" \
  --tag "$tag" \
  "$context"
# Every source change rebuilds under the same tag; the image it replaced is left untagged. Drop those
# (only the simulator's own, by its label) so a developer's disk does not fill with old copies.
docker image prune --force --filter "label=io.sglnode.test-double=true" >/dev/null
echo "built ${tag}"
