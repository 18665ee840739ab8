#!/usr/bin/env bash
# Printed at the end of `make demo`: where the report is, and how to look at and tear down the
# stack that was left running. The servers are `sglnode sim`, a test double: figures are simulated.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
topology="${1:-pd-1p1d}"
prefix="$repo_root/.sim-node"
dir="$prefix/etc/sglang/$topology"
reports="$prefix/var/lib/sglnode/reports/$topology"
router_port="$(sed -n 's/^  port: \([0-9]*\)$/\1/p' "$repo_root/inventory/topologies/$topology.yml" | tail -1)"

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
  docker compose -f $dir/compose.yaml -f $dir/compose.sim.yaml logs -f decode0
  curl -s http://127.0.0.1:$router_port/v1/models
  .venv/bin/sglnode bench --url http://127.0.0.1:$router_port --concurrency 1,8 --num-requests 16
Failure path:  make demo-oom
Tear it down:  make demo-down
SUMMARY
