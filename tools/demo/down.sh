#!/usr/bin/env bash
# make demo-down: stop every topology the demo brought up on the simulated node.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
shopt -s nullglob
for dir in "$repo_root"/.sim-node/etc/sglang/*/; do
  files=(-f "$dir/compose.yaml")
  [ -f "$dir/compose.sim.yaml" ] && files+=(-f "$dir/compose.sim.yaml")
  docker compose "${files[@]}" down --timeout 5
done
echo "demo-down: simulated stacks stopped"
