#!/usr/bin/env bash
# Builds sglnode/router:<version> from images/router/Dockerfile with the classic builder.
#
#   images/router/build.sh            build unless the tag already exists
#   FORCE=1 images/router/build.sh    rebuild anyway
#
# Env: SGLANG_ROUTER_VERSION (default the pinned sglang_router of tools/sglnode/pins.yaml), SGLNODE_EXTRA_CA
# (CA bundle pip must trust; default the host's /etc/ssl/certs/ca-certificates.crt, which carries any
# TLS-intercepting proxy's CA), ROUTER_IMAGE (default the pinned images.router), BASE_IMAGE (default
# sglnode/debian:bookworm).
# The CA is copied into the context as extra-ca.crt (git-ignored), used only in the builder stage,
# and removed again when this script exits.
set -euo pipefail

# shellcheck source=images/stage-ca.sh
source "$(dirname "${BASH_SOURCE[0]}")/../stage-ca.sh"

context="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "${context}/../.." && pwd)"
python="${repo_root}/.venv/bin/python"
[[ -x "$python" ]] || python=python3
pin() { "$python" "${repo_root}/tools/sglnode/pins.py" get "$1"; }
version="${SGLANG_ROUTER_VERSION:-$(pin sglang_router)}"
image="${ROUTER_IMAGE:-$(pin images.router)}"
base_image="${BASE_IMAGE:-sglnode/debian:bookworm}"
tag="${image}:${version}"

if [[ "${FORCE:-0}" != 1 ]] && docker image inspect "$tag" >/dev/null 2>&1; then
  echo "${tag} exists; skipping build (FORCE=1 rebuilds)"
  exit 0
fi

staged_ca="${context}/extra-ca.crt"
trap 'rm -f "$staged_ca"' EXIT
stage_extra_ca "$staged_ca"

# DOCKER_BUILDKIT=0: the Dockerfile needs nothing from BuildKit, and hosts without buildx
# (Docker 20.10 engines, CI) must build it too.
DOCKER_BUILDKIT=0 docker build \
  --build-arg "SGLANG_ROUTER_VERSION=${version}" \
  --build-arg "BASE_IMAGE=${base_image}" \
  --tag "$tag" \
  "$context"
echo "built ${tag}"
