# Sourced by images/*/build.sh and tools/setup/sglang-image.sh: what every local image build shares.
#   pin KEY              a pin of tools/sglnode/pins.yaml (pins.py runs on a bare python3 too)
#   sources_hash PATH... digest of the files under PATHs (repo-relative) that git tracks or would track
#   stage_extra_ca DEST  stage the CA bundle pip must trust into a build context
# $PYTHON picks the interpreter for pins.py (default the repo's .venv, else python3).
SGLNODE_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
readonly SGLNODE_REPO_ROOT
readonly HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt
pins_python="${PYTHON:-${SGLNODE_REPO_ROOT}/.venv/bin/python}"
[[ -x "$pins_python" ]] || pins_python=python3

pin() { "$pins_python" "${SGLNODE_REPO_ROOT}/tools/sglnode/pins.py" get "$1"; }

# A version or tag alone does not change with every edit of a Dockerfile or of the sources that go
# into an image; builds label the image with this digest and rebuild when it differs. Ignored files
# (.venv, caches, the staged CA and wheel) never count; outside a git checkout every file does.
sources_hash() {
  (
    cd "$SGLNODE_REPO_ROOT"
    if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
      git ls-files -z --cached --others --exclude-standard -- "$@"
    else
      find "$@" -type f -not -path '*/__pycache__/*' -print0
    fi | while IFS= read -r -d '' file; do
      # a tracked file deleted in the work tree is not a source any more
      [[ -f "$file" ]] && printf '%s\0' "$file"
    done | sort -z | xargs -0 -r sha256sum | sha256sum | cut -c1-16
  )
}

# Takes $SGLNODE_EXTRA_CA, else the host's bundle (which carries any TLS-intercepting proxy's CA).
# The Dockerfiles use it in their builder stage only, so it never reaches a final image; the
# caller removes DEST when it exits. With no bundle at all, DEST is empty and the image's own
# CA store is used as is.
stage_extra_ca() {
  local dest="$1"
  local source="${SGLNODE_EXTRA_CA:-$HOST_CA_BUNDLE}"
  if [[ -f "$source" ]]; then
    cp "$source" "$dest"
  elif [[ -n "${SGLNODE_EXTRA_CA:-}" ]]; then
    echo "error: SGLNODE_EXTRA_CA=${SGLNODE_EXTRA_CA} is not a file" >&2
    exit 2
  else
    : >"$dest"
  fi
}
