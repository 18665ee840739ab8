#!/usr/bin/env bash
# Local base images, because no registry can be pulled from on these machines:
#   sglnode/debian:bookworm   debootstrap (minbase) + `docker import`
#   sglnode/systemd:bookworm  images/systemd/Dockerfile on top: python3 + systemd for molecule
# Both are skipped when the tag exists. SGLNODE_DEBIAN_MIRROR overrides the mirror.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
mirror="${SGLNODE_DEBIAN_MIRROR:-http://deb.debian.org/debian}"
suite=bookworm
base_tag="sglnode/debian:$suite"
systemd_tag="sglnode/systemd:$suite"

log() { printf '[base-images] %s\n' "$*"; }

have_image() { docker image inspect "$1" >/dev/null 2>&1; }

build_debian_base() {
  if have_image "$base_tag"; then
    log "$base_tag: present"
    return
  fi
  local rootfs
  rootfs="$(mktemp -d /tmp/sglnode-rootfs.XXXXXX)"
  trap 'rm -rf "$rootfs"' RETURN
  log "$base_tag: debootstrap $suite from $mirror"
  debootstrap --variant=minbase --include=ca-certificates "$suite" "$rootfs" "$mirror" >/tmp/sglnode-debootstrap.log 2>&1 || {
    tail -20 /tmp/sglnode-debootstrap.log >&2
    exit 1
  }
  # A base image carries no apt lists or caches: every image that installs runs apt-get update.
  rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin
  tar -C "$rootfs" -c . | docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'CMD ["/bin/bash"]' \
    --message "debootstrap --variant=minbase $suite" - "$base_tag" >/dev/null
  log "$base_tag: imported"
}

build_systemd_image() {
  if have_image "$systemd_tag"; then
    log "$systemd_tag: present"
    return
  fi
  log "$systemd_tag: building"
  # The date busts the apt-lists layer once a day so package installs never use stale lists.
  docker build -q \
    --build-arg BASE_IMAGE="$base_tag" \
    --build-arg APT_LISTS_DATE="$(date -u +%Y-%m-%d)" \
    -t "$systemd_tag" "$repo_root/images/systemd" >/dev/null
  log "$systemd_tag: built"
}

build_debian_base
build_systemd_image
