#!/usr/bin/env bash
# make demo-oom: the failure path on the simulated node (servers are `sglnode sim`, a test double).
#   1. the planner refuses a topology that cannot fit, before anything is launched;
#   2. forced up anyway, the decode server dies in KV-cache allocation the way SGLang does, and
#      `sglnode wait` names the OOM phase with the evidence lines and the fix within a second.
set -uo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
topology=tools/demo/topologies/pd-kv-starved.yml
out="$repo_root/.sim-node/demo-oom"
dir="$out/etc/sglang/pd-kv-starved"
compose=(docker compose -f "$dir/compose.yaml" -f "$dir/compose.sim.yaml")

echo "== 1. Before launch: sglnode topology check (memory planner, the pinned SGLang's budget rule)"
if sglnode topology check "$topology"; then
  echo "demo-oom: expected the planner to refuse $topology" >&2
  exit 1
fi

echo
echo "== 2. Forced up anyway (sglnode topology render skips the memory preflight; the role would not)"
rm -rf "$out"
sglnode topology render "$topology" --out "$out" --runtime sim >/dev/null
trap '"${compose[@]}" down --timeout 2 >/dev/null 2>&1' EXIT
"${compose[@]}" up -d --quiet-pull 2>&1 | tail -1
sglnode wait --url http://127.0.0.1:30102 --compose-file "$dir/compose.yaml" --service decode0 --timeout 120
rc=$?
printf '\nsglnode wait exited %s (2 = crashed, diagnosis above)\n' "$rc"
if [ "$rc" -ne 2 ]; then
  echo "demo-oom: expected sglnode wait to report a crash (exit 2)" >&2
  exit 1
fi
echo "demo-oom: the crash was diagnosed; the stack is torn down."
