#!/usr/bin/env bash
# make tune-demo: a small tuning sweep on the simulated node (servers are `sglnode sim`, a TEST DOUBLE
# of SGLang; every figure is SIMULATED). Five candidates from tools/demo/tune/sweep.yml: four are
# deployed with docker compose, waited for, benchmarked and torn down (one dies at startup in KV-cache
# allocation, diagnosed and recorded), one is refused before deployment by the kernel audit. Writes the
# table, JSON, plot and the winning topology under .sim-node/tune-demo. Rerunning resumes; FRESH=1
# starts over.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
out="$repo_root/.sim-node/tune-demo"
python="$repo_root/.venv/bin/python"
[[ -x "$python" ]] || python=python3
# This checkout's sglnode (a worktree's venv may point elsewhere).
sglnode=(env "PYTHONPATH=$repo_root/tools${PYTHONPATH:+:$PYTHONPATH}" "$python" -m sglnode)
# The router and simulator images (each build script skips an up-to-date tag).
for image in router sim; do
  bash "images/$image/build.sh" | tail -1
done
fresh=()
[[ "${FRESH:-1}" == 1 ]] && fresh=(--fresh)
set +e
"${sglnode[@]}" tune run tools/demo/tune/sweep.yml --out "$out" "${fresh[@]}"
rc=$?
set -e
cat <<SUMMARY

================================================================================================
 tune-demo done (exit $rc). The servers were sglnode sim, a TEST DOUBLE of SGLang: every figure
 above is SIMULATED, not a measurement of SGLang or of the GPU node.
 Files: $out/{results.md,results.json,results.png,winner.yml,winner.json,state.json}
 Resume after an interruption: FRESH=0 make tune-demo
================================================================================================
SUMMARY
exit "$rc"
