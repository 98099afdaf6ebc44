#!/usr/bin/env bash
# Re-record every executed notebook on a 2-GPU machine in one call, within the device tool's
# 10-minute limit: GPU 0 records the H200 copies (three papermill streams side by side), GPU 1 the
# same notebooks under COURSE_KIT_EMULATE=t4 (issue 27), then notebook 09 on both GPUs (h200x2).
# Everything lands in $OUT/res.tar.gz; add the PNGs here afterwards with
#   course-kit record --finish-only --out data/reference/<slug>/notebooks
# (kaleido is too large to carry to the GPU machine).
#
# Usage there, from the project root: . .whl/activate.sh && scripts/gpu_record_all.sh [SRC]
#   SRC: a folder holding a snapshot of the repository to record from (default: the checkout),
#   so that work in progress in the working tree stays out of the records.
set -uo pipefail
SRC=${1:-$PWD}
OUT=${OUT:-$PWD/out}
RES=$OUT/res
mkdir -p "$RES"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export COURSE_KIT_DATA=${COURSE_KIT_DATA:-$PWD/data}     # the records the notebooks read
export PYTHONPATH="$SRC${PYTHONPATH:+:$PYTHONPATH}"
cd "$SRC" || exit 2
LANE_S=${LANE_S:-440}

rec() {   # rec GPU SLUG-FOLDER EMULATE NOTEBOOK...
  local gpu=$1 folder=$2 emulate=$3; shift 3
  env CUDA_VISIBLE_DEVICES="$gpu" COURSE_KIT_EMULATE="$emulate" timeout "$LANE_S" \
    python3 -m course_kit record "$@" --timeout 400 --out "$RES/$folder" >> "$RES/$folder-gpu$gpu-$1.log" 2>&1
}

start=$(date +%s)
rec 0 h200 "" 06 &
rec 0 h200 "" 10 00 01 &
rec 0 h200 "" 08 02 03 04 05 07 &
rec 1 t4-emulated t4 06 &
rec 1 t4-emulated t4 10 00 01 09 &
rec 1 t4-emulated t4 08 02 03 04 05 07 &
wait
echo "## lanes took $(( $(date +%s) - start )) s"
env CUDA_VISIBLE_DEVICES=0,1 timeout "${LANE09_S:-120}" python3 -m course_kit record 09 --timeout 110 \
  --out "$RES/h200x2" >> "$RES/h200x2.log" 2>&1
echo "## all took $(( $(date +%s) - start )) s"
grep -h "ipynb" "$RES"/*/record.log
tar -czf "$OUT/res.tar.gz" -C "$OUT" res && ls -la "$OUT"
