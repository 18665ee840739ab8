#!/usr/bin/env bash
# Installs requirements.lock into the image's venv, the only way a Python package gets in:
#
#   install-lock.sh LOCK [--without PACKAGE]...
#
# pip --require-hashes (every file checked against the lock's sha256), --no-deps (the lock is the
# whole closure, nothing is resolved here), --only-binary :all: (nothing is compiled). --without drops
# one package's entry first: the optional PD transfer backends (ENABLE_NIXL=0, ENABLE_MOONCAKE=0).
# Refuses a Python the lock was not verified for (its "# python-versions:" header line).
set -euo pipefail

lock="${1:?usage: install-lock.sh LOCK [--without PACKAGE]...}"
shift
without=()
while (($#)); do
  [[ "$1" == --without && $# -ge 2 ]] || { echo "usage: install-lock.sh LOCK [--without PACKAGE]..." >&2; exit 64; }
  without+=("$2")
  shift 2
done

python_version="$(python3 -c 'import sys; print("%d.%d" % sys.version_info[:2])')"
supported="$(sed -n 's/^# python-versions: //p' "$lock")"
if [[ " ${supported} " != *" ${python_version} "* ]]; then
  echo "install-lock: Python ${python_version} here, but ${lock} is verified for ${supported} only" \
    "(tools/setup/lock-image.sh)" >&2
  exit 1
fi

filtered="$(mktemp)"
trap 'rm -f "$filtered"' EXIT
# A lock entry is "name==version \" plus its indented --hash and "# via" lines.
awk -v drop="${without[*]:-}" '
  BEGIN { n = split(drop, names, " "); for (i = 1; i <= n; i++) skip[tolower(names[i])] = 1 }
  /^[A-Za-z0-9]/ { name = tolower($0); sub(/==.*/, "", name); keep = !(name in skip) }
  /^#/ { print; next }
  keep { print }
' "$lock" >"$filtered"
for name in "${without[@]}"; do
  grep -qiE "^${name}==" "$lock" || { echo "install-lock: ${name} is not in ${lock}" >&2; exit 1; }
  echo "install-lock: leaving out ${name}"
done

pip install --require-hashes --no-deps --only-binary :all: --progress-bar off -r "$filtered"
