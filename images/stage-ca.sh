# Sourced by images/*/build.sh: stage the CA bundle pip must trust into a build context.
#   stage_extra_ca DEST
# Takes $SGLNODE_EXTRA_CA, else the host's bundle (which carries any TLS-intercepting proxy's CA).
# The Dockerfiles use it in their builder stage only, so it never reaches a final image; the
# caller removes DEST when it exits. With no bundle at all, DEST is empty and the image's own
# CA store is used as is.
readonly HOST_CA_BUNDLE=/etc/ssl/certs/ca-certificates.crt

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
