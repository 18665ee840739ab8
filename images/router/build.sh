#!/usr/bin/env bash
# Builds sglnode/router:<version> from images/router/Dockerfile with the classic builder.
#
#   images/router/build.sh            build unless the tag exists and was built from the same sources
#   FORCE=1 images/router/build.sh    rebuild anyway
#
# Env: SGLANG_ROUTER_VERSION (default the pinned sglang_router of tools/sglnode/pins.yaml), SGLNODE_EXTRA_CA
# (CA bundle pip must trust; default the host's /etc/ssl/certs/ca-certificates.crt, which carries any
# TLS-intercepting proxy's CA), ROUTER_IMAGE (default the pinned images.router), BASE_IMAGE (default
# sglnode/debian:bookworm).
# The CA is copied into the context as extra-ca.crt (git-ignored), used only in the builder stage,
# and removed again when this script exits.
set -euo pipefail

# shellcheck source=images/build-lib.sh
source "$(dirname "${BASH_SOURCE[0]}")/../build-lib.sh"

context="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${SGLANG_ROUTER_VERSION:-$(pin sglang_router)}"
image="${ROUTER_IMAGE:-$(pin images.router)}"
base_image="${BASE_IMAGE:-sglnode/debian:bookworm}"
tag="${image}:${version}"
# An edited Dockerfile or requirements file rebuilds under the same tag (the label says what went in).
source_hash="$(sources_hash images/router images/build-lib.sh)"

if [[ "${FORCE:-0}" != 1 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
  built_from="$(docker image inspect --format '{{ index .Config.Labels "io.sglnode.source-hash" }}' "$tag")"
  if [[ "$built_from" == "$source_hash" ]]; then
    echo "${tag} exists (sources ${source_hash}); skipping build (FORCE=1 rebuilds)"
    exit 0
  fi
  echo "${tag} was built from other sources (${built_from:-none recorded}); rebuilding"
fi

staged_ca="${context}/extra-ca.crt"
trap 'rm -f "$staged_ca"' EXIT
stage_extra_ca "$staged_ca"

# DOCKER_BUILDKIT=0: the Dockerfile needs nothing from BuildKit, and hosts without buildx
# (Docker 20.10 engines, CI) must build it too.
DOCKER_BUILDKIT=0 docker build \
  --build-arg "SGLANG_ROUTER_VERSION=${version}" \
  --build-arg "BASE_IMAGE=${base_image}" \
  --build-arg "SGLNODE_SOURCE_HASH=${source_hash}" \
  --tag "$tag" \
  "$context"
# The image a rebuild replaced is left untagged: drop those (only the router's own, by its label).
docker image prune --force --filter "label=io.sglnode.sglang-router.version" >/dev/null
echo "built ${tag}"
