#!/usr/bin/env bash
# Run `molecule test` for every scenario under molecule/ (create, converge, idempotence,
# testinfra verify, destroy), each with its own timing line. All scenarios run even when one
# fails, so a single run shows every failure; the exit code is non-zero if any failed.
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
stage="$repo_root/tools/setup/stage.sh"
failed=()
scenarios=()
for config in molecule/*/molecule.yml; do
  scenarios+=("$(basename "$(dirname "$config")")")
done
if [ "${#scenarios[@]}" -eq 0 ]; then
  echo "molecule-all: no scenario found under molecule/" >&2
  exit 1
fi
for scenario in ${MOLECULE_SCENARIOS:-${scenarios[@]}}; do
  log="$repo_root/.cache/molecule-$scenario.log"
  mkdir -p "$repo_root/.cache"
  if "$stage" "molecule $scenario" molecule test -s "$scenario" >"$log" 2>&1; then
    grep -E '^\[timing\]' "$log"
    grep -E '[0-9]+ passed' "$log" | tail -1
  else
    grep -E '^\[timing\]' "$log"
    echo "---- last 80 lines of $log ----"
    tail -80 "$log"
    failed+=("$scenario")
  fi
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "molecule scenarios FAILED: ${failed[*]}"
  exit 1
fi
ran=(${MOLECULE_SCENARIOS:-${scenarios[@]}})
echo "molecule: ${#ran[@]} scenarios passed"
