#!/usr/bin/env bash
# The steps of one GPU session on 2 x H200, run by scripts/gpu_campaign.sh from its own copy of the
# repository. Benches write straight into that copy's data/reference/<slug>/ so that the notebooks
# recorded afterwards read the new records. Each step has its own time limit and log; a step that
# fails or runs out of time is logged and the plan goes on.
#   1. benches, one lane per GPU, each bench alone on its GPU;
#   2. executed notebooks (06 first, H200 and T4-emulated) beside the GPU tests;
#   3. the 2-GPU bench and notebook 09 on both GPUs.
set -uo pipefail
ROOT=$1
SRC=$ROOT/src RES=$ROOT/res
REF=$SRC/data/reference
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
export COURSE_KIT_DATA=$SRC/data
export PYTHONPATH="$SRC${PYTHONPATH:+:$PYTHONPATH}"
cd "$SRC" || exit 2
T0=$(cat "$ROOT/started")

step() {   # step NAME SECONDS "ENV=VALUE ..." COMMAND...
  local name=$1 limit=$2 envs=$3; shift 3
  local s; s=$(date +%s)
  echo "## $name started at $(( s - T0 )) s" >> "$RES/steps.log"
  # shellcheck disable=SC2086
  env $envs timeout "$limit" "$@" > "$RES/$name.log" 2>&1
  echo "## $name rc=$? took $(( $(date +%s) - s )) s" >> "$RES/steps.log"
}
BENCH="python3 -m course_kit bench"
RECORD="python3 -m course_kit record --timeout 400"

# 1. benches
( step bench-compile 800 CUDA_VISIBLE_DEVICES=0 $BENCH compile --out "$REF/h200"
  step bench-attention 300 CUDA_VISIBLE_DEVICES=0 $BENCH attention --out "$REF/h200" ) &
( step bench-batching 420 CUDA_VISIBLE_DEVICES=1 $BENCH batching --out "$REF/h200"
  step bench-async 420 CUDA_VISIBLE_DEVICES=1 $BENCH async --out "$REF/h200"
  step bench-dtypes 200 CUDA_VISIBLE_DEVICES=1 $BENCH dtypes --out "$REF/h200"
  step bench-capstone 250 CUDA_VISIBLE_DEVICES=1 $BENCH capstone --out "$REF/h200" ) &
wait

# 2. executed notebooks; the GPU tests beside them on GPU 1 (the notebooks' own timings are
#    illustrations of a run, the JSON records are the reference figures)
step rec-h200-06 450 CUDA_VISIBLE_DEVICES=0 $RECORD 06 --out "$REF/h200/notebooks" &
step rec-h200-a 450 CUDA_VISIBLE_DEVICES=0 $RECORD 03 01 07 --out "$REF/h200/notebooks" &
step rec-h200-b 450 CUDA_VISIBLE_DEVICES=0 $RECORD 08 10 --out "$REF/h200/notebooks" &
step rec-t4-06 450 "CUDA_VISIBLE_DEVICES=1 COURSE_KIT_EMULATE=t4" $RECORD 06 --out "$REF/t4-emulated/notebooks" &
step rec-h200-c 450 CUDA_VISIBLE_DEVICES=1 $RECORD 00 02 04 05 --out "$REF/h200/notebooks" &
step gpu-tests 450 CUDA_VISIBLE_DEVICES=1 python3 -m pytest -m gpu tests -q -p no:cacheprovider --timeout=300 &
wait

# 3. two GPUs
step gpu-tests-x2 200 CUDA_VISIBLE_DEVICES=0,1 python3 -m pytest -m gpu tests/test_parallel_bench.py -q -p no:cacheprovider --timeout=150
step bench-parallel 300 CUDA_VISIBLE_DEVICES=0,1 $BENCH parallel --out "$REF/h200x2"
step rec-h200x2-09 300 CUDA_VISIBLE_DEVICES=0,1 $RECORD 09 --out "$REF/h200x2/notebooks"
date +%s > "$ROOT/done"
