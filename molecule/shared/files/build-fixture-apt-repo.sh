#!/bin/sh
# TEST FIXTURE: builds a signed, flat apt repository of STAND-IN packages that carry the
# names NVIDIA's CUDA repo, NVIDIA's container-toolkit repo and Docker's repo use, so the
# host roles' real repo setup, pinning, holds and blacklists run through real apt in molecule.
# None of these packages contains NVIDIA or Docker software: each one says so in its
# description and ships at most a tiny labelled stand-in script or systemd unit.
# Served as http://127.0.0.1:<port>/{cuda,docker,nvidia-container-toolkit}/ (aliases of one repo).
# Usage: build-fixture-apt-repo.sh <repo dir>   (needs dpkg-deb, apt-ftparchive, gpg)
set -eu

REPO_DIR="$1"
WORK_DIR="$(mktemp -d)"
trap 'rm -rf "$WORK_DIR"' EXIT
LABEL="TEST FIXTURE stand-in, not the real package"
ARCH="$(dpkg --print-architecture)"

mkdir -p "$REPO_DIR"

# make_pkg NAME VERSION DEPENDS [FILES_DIR]: one stand-in .deb, optionally with a payload tree.
make_pkg() {
  name="$1" version="$2" depends="$3" payload="${4:-}"
  root="$WORK_DIR/pkg-$name-$version"
  mkdir -p "$root/DEBIAN"
  if [ -n "$payload" ]; then cp -a "$payload/." "$root/"; fi
  {
    echo "Package: $name"
    echo "Version: $version"
    echo "Architecture: $ARCH"
    echo "Maintainer: sglnode molecule fixtures <fixtures@invalid>"
    if [ -n "$depends" ]; then echo "Depends: $depends"; fi
    echo "Description: $LABEL ($name)"
    echo " Built by molecule/shared/files/build-fixture-apt-repo.sh for role tests."
  } > "$root/DEBIAN/control"
  dpkg-deb --root-owner-group --build "$root" "$REPO_DIR/${name}_${version}_${ARCH}.deb" >/dev/null
}

# unit_payload DIR UNIT: a systemd unit that only sleeps, so "enabled and running" is testable.
unit_payload() {
  mkdir -p "$1/lib/systemd/system"
  cat > "$1/lib/systemd/system/$2.service" <<EOF
[Unit]
Description=$LABEL ($2)

[Service]
ExecStart=/bin/sleep infinity

[Install]
WantedBy=multi-user.target
EOF
}

# --- NVIDIA CUDA repo names (Debian 12 flavour; 580 branch, open kernel modules) ---
DRIVER_VERSION="580.95.05-1"
# nvidia-kernel-open-dkms: like dkms, its postinst builds the module only when the running kernel's
# headers are installed, and otherwise only warns (which is how a node ends up with no module).
P="$WORK_DIR/payload-dkms"; mkdir -p "$P/DEBIAN"
cat > "$P/DEBIAN/postinst" <<'EOF'
#!/bin/sh
# TEST FIXTURE stand-in for the DKMS build of the nvidia module.
set -e
if [ "$1" = configure ]; then
  kernel="$(uname -r)"
  mkdir -p /var/lib/fixture-dkms
  if [ -d "/usr/src/linux-headers-$kernel" ]; then
    echo "nvidia (TEST FIXTURE) built for $kernel" > "/var/lib/fixture-dkms/nvidia-$kernel.built"
  else
    echo "Module build for kernel $kernel was skipped since the kernel headers for this kernel do not seem to be installed." >&2
  fi
fi
EOF
chmod 0755 "$P/DEBIAN/postinst"
# The running kernel's headers, as the OS archive names them (linux-headers-$(uname -r)).
KERNEL="$(uname -r)"
P="$WORK_DIR/payload-headers"; mkdir -p "$P/usr/src/linux-headers-$KERNEL"
echo "$LABEL" > "$P/usr/src/linux-headers-$KERNEL/FIXTURE-README"
make_pkg "linux-headers-$KERNEL" "1.0-fixture" "" "$P"
# nvidia-persistenced: its unit starts the daemon as the distributions' does, --no-persistence-mode
# (Ubuntu's nvidia-compute-utils); the stand-in daemon logs its arguments and records the persistence
# mode they ask for, which the stand-in nvidia-smi reports.
P="$WORK_DIR/payload-persistenced"; mkdir -p "$P/lib/systemd/system" "$P/usr/bin"
cat > "$P/lib/systemd/system/nvidia-persistenced.service" <<EOF
[Unit]
Description=$LABEL (nvidia-persistenced)

[Service]
ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --no-persistence-mode --verbose

[Install]
WantedBy=multi-user.target
EOF
cat > "$P/usr/bin/nvidia-persistenced" <<'EOF'
#!/bin/sh
# TEST FIXTURE stand-in for nvidia-persistenced: records its arguments and the persistence mode, then waits.
echo "$*" >> /var/log/fixture-nvidia-persistenced.log
mode=Disabled
for arg in "$@"; do
  if [ "$arg" = --persistence-mode ]; then mode=Enabled; fi
done
mkdir -p /run/fixture-nvidia
echo "$mode" > /run/fixture-nvidia/persistence-mode
exec sleep infinity
EOF
chmod 0755 "$P/usr/bin/nvidia-persistenced"
# nvidia-driver-cuda of one driver version: nvidia-smi, and the GPU checks a driver upgrade runs
# (playbooks/driver-upgrade.yml) as stand-ins. nvidia-smi answers the --query-gpu the roles ask for as
# 8 RTX PRO 6000 Blackwell GPUs would; persistence mode is what the stand-in nvidia-persistenced was
# started with (Disabled until then). A BROKEN version (second argument "broken") is one whose module
# does not talk to the GPUs: nvidia-smi and the checks fail as NVIDIA's do then.
driver_cuda_payload() {
  version="$1" broken="$2" P="$WORK_DIR/payload-driver-cuda-$1"
  mkdir -p "$P/usr/bin"
  cat > "$P/usr/bin/nvidia-smi" <<EOF
#!/usr/bin/python3
"""TEST FIXTURE stand-in for nvidia-smi ($version): --query-gpu=FIELDS --format=csv,noheader for 8 fake GPUs."""
import sys
if "$broken" == "broken":
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
          "Make sure that the latest NVIDIA driver is installed and running. (TEST FIXTURE: broken $version)")
    sys.exit(9)
try:
    persistence = open("/run/fixture-nvidia/persistence-mode").read().strip()
except OSError:
    persistence = "Disabled"
values = {"name": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "compute_cap": "12.0",
          "persistence_mode": persistence, "driver_version": "${version%-*}"}
query = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--query-gpu=")]
if len(query) != 1 or "--format=csv,noheader" not in sys.argv:
    sys.exit("stand-in nvidia-smi: only --query-gpu=FIELDS --format=csv,noheader, got %r" % sys.argv[1:])
for _ in range(8):
    print(", ".join(values[field] for field in query[0].split(",")))
EOF
  # Stand-ins for the sm_120 kernel probe and the serving image's smoke test on the GPUs.
  for check in sm120-probe image-smoke; do
    cat > "$P/usr/bin/fixture-$check" <<EOF
#!/bin/sh
# TEST FIXTURE stand-in for the $check of a driver upgrade (driver $version); logs each call.
echo "driver $version: \$*" >> /var/log/fixture-$check.log
if [ "$broken" = broken ]; then
  echo "CUDA error: no CUDA-capable device is detected (TEST FIXTURE: driver $version is broken)" >&2
  exit 1
fi
echo "$check passed on 8 GPUs at sm_120 (TEST FIXTURE stand-in, driver $version)"
EOF
  done
  chmod 0755 "$P/usr/bin/"*
  echo "$P"
}

# driver_set VERSION [broken]: the four packages of one driver version, nvidia-open depending on the rest.
driver_set() {
  make_pkg nvidia-kernel-open-dkms "$1" "" "$WORK_DIR/payload-dkms"
  make_pkg nvidia-persistenced "$1" "" "$WORK_DIR/payload-persistenced"
  make_pkg nvidia-driver-cuda "$1" "" "$(driver_cuda_payload "$1" "${2:-}")"
  make_pkg nvidia-open "$1" \
    "nvidia-kernel-open-dkms (= $1), nvidia-persistenced (= $1), nvidia-driver-cuda (= $1)"
}
driver_set "$DRIVER_VERSION"
# A newer branch in the same repo: the role's pin must keep apt on 580 anyway; a driver upgrade moves to it.
driver_set "590.44.01-1"
# A newer version that installs but does not work: a driver upgrade to it fails its verification and
# must put the previous held version back.
driver_set "595.12.01-1" broken

P="$WORK_DIR/payload-cuda"; mkdir -p "$P/usr/local/cuda-13.0/bin"
echo "$LABEL" > "$P/usr/local/cuda-13.0/FIXTURE-README"
make_pkg cuda-toolkit-13-0 "13.0.2-1" "" "$P"
make_pkg libnccl2 "2.27.7-1+cuda13.0" ""
make_pkg libnccl-dev "2.27.7-1+cuda13.0" "libnccl2 (= 2.27.7-1+cuda13.0)"
make_pkg libcudnn9-cuda-13 "9.13.0.50-1" ""
make_pkg libcudnn9-dev-cuda-13 "9.13.0.50-1" "libcudnn9-cuda-13 (= 9.13.0.50-1)"

# --- NVIDIA container toolkit repo names; nvidia-ctk is a labelled stand-in script ---
P="$WORK_DIR/payload-ctk"; mkdir -p "$P/usr/bin"
cat > "$P/usr/bin/nvidia-ctk" <<'EOF'
#!/usr/bin/python3
"""TEST FIXTURE stand-in for nvidia-ctk: writes a labelled fake CDI spec / docker runtime entry."""
import json, os, sys
args = sys.argv[1:]
with open("/var/log/fixture-nvidia-ctk.log", "a") as log:  # lets tests count invocations
    log.write(" ".join(args) + "\n")
if args[:2] == ["cdi", "generate"]:
    out = next(a.split("=", 1)[1] for a in args if a.startswith("--output="))
    os.makedirs(os.path.dirname(out), exist_ok=True)
    with open(out, "w") as f:
        f.write("# TEST FIXTURE: fake CDI spec written by the stand-in nvidia-ctk\n"
                "cdiVersion: 0.5.0\nkind: nvidia.com/gpu\ndevices:\n  - name: all\n"
                "    containerEdits: {}\n")
elif args[:2] == ["runtime", "configure"]:
    path = "/etc/docker/daemon.json"
    config = json.load(open(path)) if os.path.exists(path) else {}
    config.setdefault("runtimes", {})["nvidia"] = {"args": [], "path": "nvidia-container-runtime"}
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        json.dump(config, f)  # compact on purpose: the role must normalise it idempotently
elif args[:1] == ["--version"]:
    print("NVIDIA Container Toolkit CLI version 1.18.0 (TEST FIXTURE stand-in)")
else:
    sys.exit("stand-in nvidia-ctk: unsupported arguments %r" % args)
EOF
chmod 0755 "$P/usr/bin/nvidia-ctk"
make_pkg nvidia-container-toolkit-base "1.18.0-1" "" "$P"
make_pkg libnvidia-container1 "1.18.0-1" ""
make_pkg libnvidia-container-tools "1.18.0-1" "libnvidia-container1 (= 1.18.0-1)"
make_pkg nvidia-container-toolkit "1.18.0-1" \
  "nvidia-container-toolkit-base (= 1.18.0-1), libnvidia-container-tools (= 1.18.0-1)"

# --- Docker repo names; docker.service only sleeps (no nested dockerd) ---
P="$WORK_DIR/payload-docker"; unit_payload "$P" docker
make_pkg docker-ce "5:28.5.1-1~debian.12~bookworm" "" "$P"
make_pkg docker-ce-cli "5:28.5.1-1~debian.12~bookworm" ""
make_pkg containerd.io "1.7.28-1~debian.12~bookworm" ""
make_pkg docker-compose-plugin "2.40.0-1~debian.12~bookworm" ""
# docker-buildx-plugin: a CLI plugin at Docker CE's path that answers `docker buildx version` and runs
# `docker buildx build ARGS` as `DOCKER_BUILDKIT=1 docker build ARGS`, the CLI's own BuildKit client
# (a Docker CLI before 23, e.g. Debian's docker.io 20.10, must be installed next to it). Each call is
# logged so tests can tell which path built an image. It contains no buildx code.
P="$WORK_DIR/payload-buildx"; mkdir -p "$P/usr/libexec/docker/cli-plugins"
cat > "$P/usr/libexec/docker/cli-plugins/docker-buildx" <<'BUILDX'
#!/bin/sh
# TEST FIXTURE stand-in for docker-buildx-plugin (molecule/shared/files/build-fixture-apt-repo.sh).
set -eu
if [ "${1:-}" = docker-cli-plugin-metadata ]; then
  echo '{"SchemaVersion":"0.1.0","Vendor":"sglnode test fixture","Version":"v0.29.1","ShortDescription":"TEST FIXTURE stand-in for buildx"}'
  exit 0
fi
# The CLI passes its global options (--host ...) and then the plugin's name ("buildx") first.
host=""
while [ $# -gt 0 ] && [ "$1" != buildx ]; do
  case "$1" in
    -H | --host) host="$2"; shift 2 ;;
    --host=*) host="${1#--host=}"; shift ;;
    *) shift ;;
  esac
done
shift
echo "$*" >> /var/log/fixture-docker-buildx.log
case "${1:-}" in
  version) echo "github.com/docker/buildx v0.29.1 TEST-FIXTURE-stand-in" ;;
  build) shift; DOCKER_BUILDKIT=1 exec docker ${host:+--host "$host"} build "$@" ;;
  *) echo "stand-in docker-buildx: unsupported arguments: $*" >&2; exit 1 ;;
esac
BUILDX
chmod 0755 "$P/usr/libexec/docker/cli-plugins/docker-buildx"
make_pkg docker-buildx-plugin "0.29.1-1~debian.12~bookworm" "" "$P"

# --- Index and sign (throwaway key, so signed-by runs for real) ---
cd "$REPO_DIR"
apt-ftparchive packages . > Packages
gzip -9kf Packages
apt-ftparchive -o APT::FTPArchive::Release::Label="sglnode-test-fixture" release . > Release
export GNUPGHOME="$WORK_DIR/gnupg"
mkdir -m 0700 "$GNUPGHOME"
gpg --batch --quiet --passphrase '' --quick-gen-key "sglnode test fixture <fixtures@invalid>" ed25519 sign never
gpg --batch --quiet --yes --clearsign -o InRelease Release
gpg --batch --quiet --yes --armor --detach-sign -o Release.gpg Release
gpg --batch --quiet --armor --export > fixture.pub
# One repo, one URL per upstream it stands in for: apt rejects one URL with two signed-by keys.
for alias in cuda docker nvidia-container-toolkit; do ln -sfn . "$alias"; done
