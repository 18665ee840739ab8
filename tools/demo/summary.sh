#!/usr/bin/env bash
# Printed at the end of `make demo`: where the report is, and how to look at and tear down the
# stack that was left running. The servers are `sglnode sim`, a test double: figures are simulated.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
topology="${1:-pd-1p1d}"
prefix="$repo_root/.sim-node"
dir="$prefix/etc/sglang/$topology"
reports="$prefix/var/lib/sglnode/reports/$topology"
# From the rollout report, read once: the router's URL as the rollout check reached it (the topology
# may leave its port to the default), and a server to follow (a PD topology's decode side, else the first).
read -r router_url server < <(python3 -c 'import json, sys
waits = json.load(open(sys.argv[1]))["waits"]
names = [w["server"] for w in waits if w["server"] != "router"]
print(next(w["url"] for w in waits if w["server"] == "router"), next((n for n in names if n.startswith("decode")), names[0]))' "$reports/report.json")

cat <<SUMMARY

================================================================================================
 Demo done: site.yml ran on the simulated node (hardware steps skipped with messages), topology
 $topology is up with simulated SGLang workers (sglnode sim, a TEST DOUBLE) and the real
 sglang-router. Every figure below is SIMULATED, not a measurement of SGLang or the GPU node.
================================================================================================
SUMMARY
cat "$reports/report.md"
cat <<SUMMARY
Files:   $reports/{report.md,report.json,bench.json,bench.png,plan.json}
Compose: $dir/compose.yaml (+ compose.sim.yaml)

Look at it:
  docker compose -f $dir/compose.yaml -f $dir/compose.sim.yaml ps
  docker compose -f $dir/compose.yaml -f $dir/compose.sim.yaml logs -f $server
  curl -s $router_url/v1/models
  .venv/bin/sglnode bench --url $router_url --concurrency 1,8 --num-requests 16
Failure path:  make demo-oom
Tear it down:  make demo-down
SUMMARY
