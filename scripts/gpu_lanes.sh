#!/usr/bin/env bash
# Run independent GPU work side by side, one lane per GPU of a multi-GPU machine, then pack the
# results. Each lane sees one GPU (or the GPUs it names), so its records carry that lane's slug.
#   scripts/gpu_lanes.sh "0|bench cuda_graphs model" "1|bench amp -- record 02" "2,3|bench parallel"
set -uo pipefail
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT/results"
pids=()
i=0
for lane in "$@"; do
  gpus=${lane%%|*}; work=${lane#*|}
  # shellcheck disable=SC2086
  (CUDA_VISIBLE_DEVICES=$gpus LANE=$i NO_TAR=1 timeout "${LANE_TIMEOUT:-3000}" scripts/gpu_session.sh $work > "$OUT/results/lane$i.log" 2>&1) &
  pids+=($!); i=$((i + 1))
done
for p in "${pids[@]}"; do wait "$p"; done
for f in "$OUT"/results/lane*.log; do echo "=== $f"; grep -E "^## |passed|failed|FAILED|Error|error:|\.ipynb" "$f" | tail -25; done
tar -czf "$OUT/results.tar.gz" -C "$OUT" results && ls -la "$OUT"
