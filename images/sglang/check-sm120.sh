#!/usr/bin/env bash
# Checks that CUDA libraries carry SASS (cubin) for the target GPU, without a GPU.
#
#   check-sm120.sh [--arch 120] LIBRARY...
#
# Each LIBRARY must hold at least one embedded cubin for sm_<arch>, sm_<arch>a or sm_<arch>f
# (as `cuobjdump --list-elf` names them, e.g. "k.1.sm_120a.cubin"). PTX alone does not count:
# it is JIT-compiled at first launch (slow, and arch-specific "a" features are never PTX-portable).
# Output: one line per library, "ok" or "missing", with the SASS arches found.
# Exit codes: 0 every library has the arch; 1 at least one does not (or has no device code, or is
# absent); 2 usage error or no cuobjdump (set CUOBJDUMP=/path/to/cuobjdump to pick one).
set -euo pipefail

# RTX PRO 6000 Blackwell reports compute capability 12.0 (nvidia-smi --query-gpu=compute_cap).
readonly DEFAULT_ARCH=120
readonly EXIT_OK=0 EXIT_MISSING=1 EXIT_USAGE=2

usage() {
  echo "usage: $0 [--arch NNN] LIBRARY..." >&2
  exit "$EXIT_USAGE"
}

find_cuobjdump() {
  if [[ -n "${CUOBJDUMP:-}" ]]; then
    echo "$CUOBJDUMP"
  elif command -v cuobjdump >/dev/null 2>&1; then
    command -v cuobjdump
  elif [[ -x /usr/local/cuda/bin/cuobjdump ]]; then
    echo /usr/local/cuda/bin/cuobjdump
  else
    return 1
  fi
}

arch="$DEFAULT_ARCH"
libraries=()
while (($#)); do
  case "$1" in
    --arch)
      [[ $# -ge 2 && "$2" =~ ^[0-9]+$ ]] || usage
      arch="$2"
      shift 2
      ;;
    -h | --help) usage ;;
    -*) usage ;;
    *)
      libraries+=("$1")
      shift
      ;;
  esac
done
((${#libraries[@]})) || usage

if ! cuobjdump_bin="$(find_cuobjdump)" || [[ ! -x "$cuobjdump_bin" ]]; then
  echo "error: cuobjdump not found (install the CUDA toolkit's cuobjdump or set CUOBJDUMP)" >&2
  exit "$EXIT_USAGE"
fi

status="$EXIT_OK"
for library in "${libraries[@]}"; do
  if [[ ! -f "$library" ]]; then
    echo "missing  sm_${arch}  ${library}  (no such file)"
    status="$EXIT_MISSING"
    continue
  fi
  # cuobjdump exits non-zero for files without device code; that is a finding, not a crash.
  listing="$("$cuobjdump_bin" --list-elf "$library" 2>/dev/null || true)"
  found="$(grep -oE 'sm_[0-9]+[af]?' <<<"$listing" | sort -u | tr '\n' ' ' || true)"
  found="${found% }"
  if grep -qE "\.sm_${arch}[af]?\.cubin" <<<"$listing"; then
    echo "ok       sm_${arch}  ${library}  (has: ${found})"
  elif [[ -z "$found" ]]; then
    echo "missing  sm_${arch}  ${library}  (no SASS at all: no device code, or PTX only)"
    status="$EXIT_MISSING"
  else
    echo "missing  sm_${arch}  ${library}  (has: ${found})"
    status="$EXIT_MISSING"
  fi
done
exit "$status"
