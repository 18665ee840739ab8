#!/usr/bin/env bash
# Run one stage of `make test`/`make demo` and print a timing line for it, so a slow or failing
# stage is visible at a glance: "[timing] <stage>: <seconds>s ok|FAILED (rc N)".
set -uo pipefail
stage="$1"
shift
printf '\n==> %s\n' "$stage"
start=$(date +%s)
"$@"
rc=$?
elapsed=$(( $(date +%s) - start ))
if [ "$rc" -eq 0 ]; then
  printf '[timing] %s: %ss ok\n' "$stage" "$elapsed"
else
  printf '[timing] %s: %ss FAILED (rc %s)\n' "$stage" "$elapsed" "$rc"
fi
exit "$rc"
