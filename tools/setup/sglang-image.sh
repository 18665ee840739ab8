#!/usr/bin/env bash
# Builds the real SGLang image (images/sglang) on this machine: `make image`, CI and the tests.
#
#   tools/setup/sglang-image.sh              build unless an image with the same input tag exists
#   tools/setup/sglang-image.sh --print-tag  print the image reference these inputs give; build nothing
#
# The tag comes from images/sglang/image_tag.py (the same script the sglang_image role runs on the
# node): versions from the lock plus a digest of the build context and the build args. Identical
# inputs find their tag and build nothing; any change gives a new tag. After a build (or a skip) the
# reference is written to .cache/sglang-image.tag, for scripts and tests:
#   docker run --rm "$(cat .cache/sglang-image.tag)" python3 -c 'import sglang.srt.server_args'
#
# Base: the local Debian 12 base (sglnode/debian:bookworm, tools/setup/base-images.sh), with the CUDA
# user space from the lock's wheels; the node builds on NVIDIA's CUDA image instead (the role's default).
# Builder: `docker buildx build --load` when the buildx plugin is there, else the classic CLI's own
# BuildKit client (DOCKER_BUILDKIT=1 docker build: Docker CLIs before 23, e.g. Debian's docker.io 20.10,
# which is tried at /usr/bin/docker when the CLI on PATH needs buildx for BuildKit).
#
# Pinned build args (the GPU's CUDA_ARCH, DEEPEP_REF) and the image name come from tools/sglnode/pins.yaml.
#
# Env: SGLANG_IMAGE_NAME (images.sglang of the pins), SGLANG_BASE_IMAGE (sglnode/debian:bookworm), SGLNODE_EXTRA_CA
# (PEM bundle pip must trust; default the host's bundle, passed as the BuildKit secret extra_ca and never
# written to a layer), SGLANG_IMAGE_BUILD_ARGS (extra NAME=VALUE words, e.g. "ENABLE_MOONCAKE=1").
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
context="$repo_root/images/sglang"
# shellcheck source=images/build-lib.sh
source "$repo_root/images/build-lib.sh"
name="${SGLANG_IMAGE_NAME:-$(pin images.sglang)}"
base_image="${SGLANG_BASE_IMAGE:-sglnode/debian:bookworm}"
tag_file="$repo_root/.cache/sglang-image.tag"
readonly DEBIAN_DOCKER_CLI=/usr/bin/docker
readonly BUILT_BY_LABEL=io.sglnode.built-by=tools/setup/sglang-image.sh

log() { printf '[sglang-image] %s\n' "$*" >&2; }

build_args=("BASE_IMAGE=${base_image}" "CUDA_ARCH=$(pin gpu.cuda_arch)" "DEEPEP_REF=$(pin deepep)")
read -r -a extra_args <<<"${SGLANG_IMAGE_BUILD_ARGS:-}"
build_args+=("${extra_args[@]}")

tag_options=(--name "$name")
for arg in "${build_args[@]}"; do tag_options+=(--build-arg "$arg"); done
inputs_json="$(mktemp)"
trap 'rm -f "$inputs_json"' EXIT
python3 "$context/image_tag.py" "$context" "${tag_options[@]}" --json >"$inputs_json"
ref="$(python3 -c 'import json, sys; print(json.load(open(sys.argv[1]))["ref"])' "$inputs_json")"

if [[ "${1:-}" == --print-tag ]]; then
  echo "$ref"
  exit 0
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--print-tag]" >&2
  exit 64
fi

mkdir -p "$(dirname "$tag_file")"
if docker image inspect "$ref" >/dev/null 2>&1; then
  log "$ref exists: inputs unchanged, nothing to build"
  echo "$ref" >"$tag_file"
  exit 0
fi

# Which builder: buildx, else a CLI whose `build` runs BuildKit itself (it lists --secret).
builder=()
if docker buildx version >/dev/null 2>&1; then
  builder=(docker buildx build --load)
else
  for cli in docker "$DEBIAN_DOCKER_CLI"; do
    if DOCKER_BUILDKIT=1 "$cli" build --help 2>/dev/null | grep -q -- '--secret'; then
      builder=(env DOCKER_BUILDKIT=1 "$cli" build)
      break
    fi
  done
fi
if ((${#builder[@]} == 0)); then
  log "no BuildKit builder: install the docker buildx plugin (or Debian's docker.io, whose 20.10 CLI has BuildKit built in)"
  exit 1
fi

if ! docker image inspect "$base_image" >/dev/null 2>&1; then
  log "base $base_image missing; building the local bases"
  bash "$repo_root/tools/setup/base-images.sh"
fi

ca="${SGLNODE_EXTRA_CA:-$HOST_CA_BUNDLE}"
secret=()
[[ -s "$ca" ]] && secret=(--secret "id=extra_ca,src=${ca}")

label_args="$(python3 -c 'import json, sys; print(" ".join(f"{k}={v}" for k, v in json.load(open(sys.argv[1]))["label_args"].items()))' "$inputs_json")"
read -r -a label_args <<<"$label_args"
revision="$(git -C "$repo_root" rev-parse --short HEAD 2>/dev/null || echo unknown)"
cli_args=()
for arg in "${build_args[@]}" "${label_args[@]}" "IMAGE_REVISION=${revision}"; do cli_args+=(--build-arg "$arg"); done

log "building $ref with: ${builder[*]} (base $base_image)"
start=$(date +%s)
"${builder[@]}" --progress=plain "${secret[@]}" "${cli_args[@]}" --label "$BUILT_BY_LABEL" --tag "$ref" "$context"
log "built $ref in $(($(date +%s) - start))s ($(docker image inspect --format '{{.Size}}' "$ref" | awk '{printf "%.1f GB", $1 / 1e9}'))"
echo "$ref" >"$tag_file"

# Images this script built from other inputs are superseded: drop them (by their label) so a machine's
# disk does not fill with 11 GB copies. The build cache keeps their layers for a quick way back.
docker image ls --filter "label=${BUILT_BY_LABEL}" --format '{{.Repository}}:{{.Tag}}' "$name" \
  | { grep -vxF "$ref" || true; } | while read -r old; do
  log "removing superseded $old"
  docker image rm "$old" >/dev/null
done
