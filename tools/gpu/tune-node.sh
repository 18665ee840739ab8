#!/usr/bin/env bash
# The GPU-only steps of the tuning campaign, as one prepared script for the node (docs/tune.md):
#   1. all-reduce sweep: every NCCL variant of the sweep spec x every TP group, with the image's own
#      torch/NCCL (no downloads) -> $OUT/allreduce.json, ranked per TP size;
#   2. MoE coverage: which fused-MoE Triton configs SGLang ships for this GPU and the presets' shapes
#      -> $OUT/moe-coverage.json;
#   3. MoE tuning: the missing configs, timed on this GPU with SGLang's own kernel, written beside a
#      copy of the wheel's configs into a cache root keyed by SGLang, Triton and GPU, then checked
#      again with SGLang's lookup (every Triton-run shape must now be exact).
# A few minutes on the node (step 1: ~3 min for 4 variants x 4 groups; step 3: a few minutes per
# missing file in quick mode, none for DeepSeek-V4-Flash, whose FP4 experts do not run on Triton).
#
# Env: SGLANG_IMAGE (default .cache/sglang-image.tag, else the sglang_image role's tag), SPEC (default
# tools/gpu/node-sweep.yml: its nccl variants), OUT (default .cache/tune-node), MOE_CACHE (default
# /var/cache/sglnode/moe-configs), AR_GROUPS (default "0,1;0-3;4-7;0-7"), SIZES (default 1024:268435456),
# PRESETS (default: every MoE preset), TPS (default 4,8), MOE_SEARCH (quick | full), SKIP_ALLREDUCE=1,
# SKIP_MOE=1. Exit 0 when both steps succeed, 1 when a variant failed or a config is still missing.
set -euo pipefail
repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$repo_root"
python="$repo_root/.venv/bin/python"
[[ -x "$python" ]] || python=python3
# This checkout's sglnode (a worktree's venv may point elsewhere).
sglnode=(env "PYTHONPATH=$repo_root/tools${PYTHONPATH:+:$PYTHONPATH}" "$python" -m sglnode)
image="${SGLANG_IMAGE:-$(cat .cache/sglang-image.tag 2>/dev/null || "$python" tools/sglnode/pins.py get sglang_image)}"
spec="${SPEC:-tools/gpu/node-sweep.yml}"
out="${OUT:-$repo_root/.cache/tune-node}"
moe_cache="${MOE_CACHE:-/var/cache/sglnode/moe-configs}"
groups="${AR_GROUPS:-0,1;0-3;4-7;0-7}"
sizes="${SIZES:-1024:268435456}"
tps="${TPS:-4,8}"
search="${MOE_SEARCH:-quick}"
inimage="$repo_root/tools/sglnode/tune/inimage"
rc=0

say() { printf '\n== %s\n' "$*"; }
docker image inspect "$image" >/dev/null 2>&1 || { echo "tune-node: image $image not found (make image)" >&2; exit 2; }
command -v nvidia-smi >/dev/null || { echo "tune-node: no nvidia-smi: this script needs the node's GPUs" >&2; exit 2; }
nvidia-smi --query-gpu=index,name,memory.total --format=csv,noheader
# The image runs as UID 10002: it writes results and the cache into these directories.
mkdir -p "$out" "$moe_cache"
chmod a+rwx "$out" "$moe_cache"
gpu_run=(docker run --rm --gpus all --ipc host --shm-size 32g --ulimit memlock=-1 --network none
  -v "$inimage:/sglnode-inimage:ro" -v "$out:/out")

if [[ "${SKIP_ALLREDUCE:-0}" != 1 ]]; then
  say "1. all-reduce sweep: NCCL variants of $spec x groups $groups"
  "${sglnode[@]}" tune nccl-env "$spec" >"$out/nccl-variants.json"
  chmod a+r "$out/nccl-variants.json"
  "${gpu_run[@]}" "$image" python3 /sglnode-inimage/allreduce_sweep.py --backend nccl \
    --variants /out/nccl-variants.json --groups "$groups" --sizes "$sizes" --timeout-s 120 \
    --out /out/allreduce.json || rc=1
  for tp in 2 4 8; do "${sglnode[@]}" tune nccl "$out/allreduce.json" --tp "$tp"; done
fi

if [[ "${SKIP_MOE:-0}" != 1 ]]; then
  say "2. MoE config coverage (SGLang's own lookup in $image)"
  preset_args=()
  for preset in ${PRESETS:-}; do preset_args+=(--preset "$preset"); done
  "${sglnode[@]}" tune moe-coverage --image "$image" --tp "$tps" "${preset_args[@]}" --json >"$out/moe-coverage.json" || true
  "${sglnode[@]}" tune moe-coverage --image "$image" --tp "$tps" "${preset_args[@]}" || true
  versions="$(python3 -c 'import json,sys,re; r=json.load(open(sys.argv[1])); print("sglang-%s_triton-%s_%s" % (r["sglang"], r["triton"], re.sub("[^A-Za-z0-9.-]+", "-", r["device_name"])))' "$out/moe-coverage.json")"
  root="$moe_cache/$versions"
  mkdir -p "$root" && chmod a+rwx "$root"
  chmod a+r "$out/moe-coverage.json"
  say "3. MoE tuning of the missing configs into $root (search: $search)"
  "${gpu_run[@]}" -v "$root:/cache" "$image" python3 /sglnode-inimage/moe_tune.py \
    --cases /out/moe-coverage.json --cache-root /cache --search "$search" || rc=1
  chmod -R a+rX "$root"
  say "   coverage with the cache mounted as SGLANG_MOE_CONFIG_DIR"
  "${sglnode[@]}" tune moe-coverage --image "$image" --tp "$tps" "${preset_args[@]}" --config-dir "$root" || rc=1
  echo "MoE config cache: $root"
fi

say "Next: the sweep, with this node's measurements"
echo "  sglnode tune run $spec --out .cache/tune-run --nccl-measurements $out/allreduce.json --moe-config-dir ${root:-DIR}"
exit "$rc"
