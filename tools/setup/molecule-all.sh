#!/usr/bin/env bash
# Run `molecule test` for every scenario under molecule/ (create, converge, idempotence,
# testinfra verify, destroy), each with its own timing line. All scenarios run even when one
# fails, so a single run shows every failure; the exit code is non-zero if any failed.
#
# MOLECULE_JOBS (default 2) scenarios run at once, longest first: each has its own container
# (sglnode-<scenario>) and its own log, and most of a scenario's time is waiting on apt, systemd and
# docker, so two at once finish well before one on a 2-core CI machine (serial 1430 s, two lanes ~730 s).
# MOLECULE_SCENARIOS="a b" runs only those.
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
stage="$repo_root/tools/setup/stage.sh"
jobs="${MOLECULE_JOBS:-2}"
if ! [[ "$jobs" =~ ^[1-9][0-9]*$ ]]; then
  echo "molecule-all: MOLECULE_JOBS must be a positive integer, got '$jobs'" >&2
  exit 2
fi
scenarios=()
for config in molecule/*/molecule.yml; do
  scenarios+=("$(basename "$(dirname "$config")")")
done
if [ "${#scenarios[@]}" -eq 0 ]; then
  echo "molecule-all: no scenario found under molecule/" >&2
  exit 1
fi
read -r -a selected <<<"${MOLECULE_SCENARIOS:-${scenarios[*]}}"
mkdir -p "$repo_root/.cache"

# One scenario: its log, then its result file (ok|failed), read after every lane is done.
run_one() {
  local scenario="$1" log="$repo_root/.cache/molecule-$1.log"
  if "$stage" "molecule $scenario" molecule test -s "$scenario" >"$log" 2>&1; then
    echo ok >"$log.result"
  else
    echo failed >"$log.result"
  fi
}

# Longest first, then whichever lane is free takes the next (xargs -P): the long scenarios do not end
# up queued behind each other (measured on 2 cores: sglang_image 315 s, nvidia_driver 271 s, ...).
longest_first=(sglang_image nvidia_driver driver_upgrade cuda_toolkit container_runtime flash_attn)
ordered=()
for scenario in "${longest_first[@]}"; do
  [[ " ${selected[*]} " == *" $scenario "* ]] && ordered+=("$scenario")
done
for scenario in "${selected[@]}"; do
  [[ " ${ordered[*]} " == *" $scenario "* ]] || ordered+=("$scenario")
done
export repo_root stage
export -f run_one
printf '%s\n' "${ordered[@]}" | xargs -P "$jobs" -I{} bash -c 'run_one "$1"' _ {} &
queue_pid=$!
# Ctrl-C / SIGTERM: stop every running scenario (molecule's own children with them), keep the logs.
trap 'pkill -TERM -P "$queue_pid" 2>/dev/null; kill -TERM "$queue_pid" 2>/dev/null; wait; echo "molecule-all: interrupted; logs in .cache/molecule-*.log" >&2; exit 130' INT TERM
wait "$queue_pid"

failed=()
for scenario in "${selected[@]}"; do
  log="$repo_root/.cache/molecule-$scenario.log"
  grep -E '^\[timing\]' "$log"
  if [ "$(cat "$log.result" 2>/dev/null)" = ok ]; then
    grep -E '[0-9]+ passed' "$log" | tail -1
  else
    echo "---- last 80 lines of $log ----"
    tail -80 "$log"
    failed+=("$scenario")
  fi
  rm -f "$log.result"
done
if [ "${#failed[@]}" -gt 0 ]; then
  echo "molecule scenarios FAILED: ${failed[*]}"
  exit 1
fi
echo "molecule: ${#selected[@]} scenarios passed"
