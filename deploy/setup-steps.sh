#!/usr/bin/env bash
# Runs make's set-up targets side by side, each target's output printed whole when it ends, and when any fails, names
# it at the end with the last lines of its own output: other steps' output would otherwise bury the cause.
# Usage: deploy/setup-steps.sh MAKE TARGET...   (from a recipe, as `deploy/setup-steps.sh $(MAKE) ...`)
set -uo pipefail
make_command=$1
shift
log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$make_command" -j3 --output-sync=target "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
[ "$status" -eq 0 ] && exit 0
# A failed target's output ends at make's own "*** [Makefile:N: target] Error" line; it starts after the block before.
awk '
  /Entering directory|Leaving directory/ { block = ""; next }
  /\*\*\* \[.*\] Error/ {
    target = $0; sub(/.*\*\*\* \[/, "", target); sub(/\].*/, "", target)
    if (!(target in seen)) { seen[target] = 1; failed[++n] = target; output[n] = block }
    block = ""; next
  }
  { block = block $0 "\n" }
  END {
    if (n == 0) exit
    printf "\n==== set-up failed in %d step(s) ====\n", n
    for (i = 1; i <= n; i++) {
      printf "\n---- %s: the end of its output ----\n", failed[i]
      lines = split(output[i], all, "\n"); from = lines > 40 ? lines - 40 : 1
      for (j = from; j <= lines; j++) if (all[j] != "") print all[j]
    }
  }' "$log" >&2
exit "$status"
