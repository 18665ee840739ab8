#!/usr/bin/env bash
# Run by `make demo` after site.yml: two changes through playbooks/serve.yml on the simulated node
# (servers are `sglnode sim`, a TEST DOUBLE; every downtime is SIMULATED):
#   1. a successful switch to a second topology (tp4x2), which becomes the known-good deployment;
#   2. a switch to a topology whose decode server dies in KV-cache allocation at startup (the memory
#      preflight is turned off so it reaches the node, as a topology the planner misjudged would): its
#      rollout check fails, tp4x2 comes back and is validated again, and the playbook fails naming the crash.
# Prints each outcome and its downtime from the node's record (sglnode status --json). Leaves tp4x2 up.
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
state_dir="$repo_root/.sim-node/var/lib/sglnode"
log_dir="$repo_root/.sim-node/demo-switch"
mkdir -p "$log_dir"
# A shorter rollout check than site.yml's: the demo is about the switch, not the benchmark.
quick=(-e '{"sglang_validate_concurrency": "1,4", "sglang_validate_num_requests": 8, "sglang_validate_duration_s": 5}')

attempts() { sglnode status --state-dir "$state_dir" --json | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["history"]))'; }

# outcome N: the N-th attempt of the record, as one line.
outcome() {
  sglnode status --state-dir "$state_dir" --json >"$log_dir/status.json"
  python3 - "$log_dir/status.json" "$1" <<'PY'
import json
import sys

attempt = json.load(open(sys.argv[1]))["history"][int(sys.argv[2]) - 1]
diagnosis = attempt.get("diagnosis") or {}
why = " ".join(str(diagnosis[k]) for k in ("server", "cause", "phase") if diagnosis.get(k))
previous = (attempt.get("previous") or {}).get("topology_name", "-")
print(
    f"   attempt #{attempt['id']} {attempt['action']} {previous} -> {attempt['target']['topology_name']}: "
    f"{attempt['outcome'].upper()}{' (' + why + ')' if why else ''}, "
    f"downtime {attempt['downtime_s']} s without a ready router (SIMULATED)"
)
PY
}

echo "== Switch 1: playbooks/serve.yml to tp4x2 (expected: ok, the new known-good deployment)"
before=$(attempts)
if ! ansible-playbook -i inventory/sim playbooks/serve.yml -e sglang_topology_name=tp4x2 "${quick[@]}" \
  >"$log_dir/1-switch.log" 2>&1; then
  tail -40 "$log_dir/1-switch.log"
  echo "demo: the switch to tp4x2 failed (log: $log_dir/1-switch.log)" >&2
  exit 1
fi
grep -o 'switch to tp4x2 .*SIMULATED[^.]*' "$log_dir/1-switch.log" | head -1 | sed 's/^/   /'
[ "$(attempts)" -gt "$before" ] && outcome "$(attempts)"

echo
echo "== Switch 2: to pd-kv-starved, whose decode server runs out of memory for its KV cache at startup"
echo "   (memory preflight off; expected: rollout check fails, tp4x2 restored and validated again)"
before=$(attempts)
if ansible-playbook -i inventory/sim playbooks/serve.yml -e sglang_topology_file="$repo_root/tools/demo/topologies/pd-kv-starved.yml" \
  -e '{"sglang_serve_memory_preflight": false, "nccl_env_memory_preflight": false}' "${quick[@]}" >"$log_dir/2-rollback.log" 2>&1; then
  echo "demo: the switch to pd-kv-starved was expected to fail and roll back (log: $log_dir/2-rollback.log)" >&2
  exit 1
fi
if ! grep -q 'Rolled back to tp4x2' "$log_dir/2-rollback.log"; then
  tail -40 "$log_dir/2-rollback.log"
  echo "demo: no automatic rollback to tp4x2 (log: $log_dir/2-rollback.log)" >&2
  exit 1
fi
grep -o 'failed its rollout check: [^.]*' "$log_dir/2-rollback.log" | head -1 | sed 's/^/   playbook: /'
[ "$(attempts)" -gt "$before" ] && outcome "$(attempts)"

echo
echo "== Node record now (sglnode status --state-dir $state_dir)"
sglnode status --state-dir "$state_dir" | sed 's/^/   /' | head -30
