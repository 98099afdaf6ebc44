#!/usr/bin/env bash
# A whole GPU session's plan (scripts/gpu_campaign_plan.sh) on a 2-GPU machine, longer than one
# device call allows: the first call starts it in its own process session (setsid), so it outlives
# that call; every call waits for it up to WAIT_S seconds and packs what is finished so far into
# $OUT/campaign.tar.gz, so a machine lost between calls loses only the unfinished steps.
# Call again within the machine's idle-release time, or the plan goes with the machine.
#
# Usage there, from the project root:
#   first call:  . .whl/activate.sh && scripts/gpu_campaign.sh SNAPSHOT
#   later calls: scripts/gpu_campaign.sh SNAPSHOT   (no re-install: the plan is using /tmp/site)
# SNAPSHOT: a copy of the repository (git archive of HEAD) that the plan runs from; without its own
# data/ it takes the checkout's (committed records, data/traces).
set -uo pipefail
SRC=$(cd "${1:?snapshot folder}" && pwd)
ROOT=${CAMPAIGN_ROOT:-/tmp/campaign}      # on the machine's own disk: kept between calls
OUT=${OUT:-$PWD/out}
WAIT_S=${WAIT_S:-560}
t_call=$(date +%s)
if [ ! -e "$ROOT/started" ]; then
  mkdir -p "$ROOT/res"
  cp -r "$SRC" "$ROOT/src"
  [ -d "$ROOT/src/data" ] || cp -r "$PWD/data" "$ROOT/src/data"   # the checkout's records and traces
  date +%s > "$ROOT/started"
  setsid nohup env PLAN="${PLAN:-final}" bash "$ROOT/src/scripts/gpu_campaign_plan.sh" "$ROOT" \
    > "$ROOT/res/plan.log" 2>&1 < /dev/null &
  echo "campaign started"
fi
while [ ! -e "$ROOT/done" ] && [ $(( $(date +%s) - t_call )) -lt "$WAIT_S" ]; do sleep 5; done
echo "== $( [ -e "$ROOT/done" ] && echo done || echo running ) after $(( $(date +%s) - $(cat "$ROOT/started") )) s"
cat "$ROOT/res/steps.log" 2>/dev/null
mkdir -p "$OUT"
# only what the plan wrote (a whole data/reference would pass the 16 MiB a returned file may have)
(cd "$ROOT" && find src/data/reference -type f -newer started > res/changed.txt)
tar -czf "$OUT/campaign.tar.gz" -C "$ROOT" res -T "$ROOT/res/changed.txt" 2>/dev/null
ls -la "$OUT"
