#!/usr/bin/env bash
# The steps of one GPU session on ONE H200, run by scripts/gpu_campaign.sh from its own copy of the
# repository. Everything runs alone on the GPU, one step at a time (DESIGN.md: a recorded run is
# alone on its GPU): benches first, writing straight into that copy's data/reference/h200/ so that
# the notebooks recorded afterwards read the new records; then every H200 notebook, one at a time
# (course-kit record checks the GPU is quiet and stamps it); then the GPU tests. Each step has its
# own time limit and log; a step that fails or runs out of time is logged and the plan goes on.
#   PLAN=check   a short first call: the new GPU code's tests, and the records that shape later work
#   PLAN=final   the records, the notebooks, the GPU tests (default)
set -uo pipefail
ROOT=$1
SRC=$ROOT/src RES=$ROOT/res
REF=$SRC/data/reference
PLAN=${PLAN:-final}
export PYTHONUNBUFFERED=1 COURSE_KIT_DATA=$SRC/data
export PYTHONPATH="$SRC${PYTHONPATH:+:$PYTHONPATH}"
cd "$SRC" || exit 2
T0=$(cat "$ROOT/started")

step() {   # step NAME SECONDS COMMAND...
  local name=$1 limit=$2; shift 2
  local s; s=$(date +%s)
  echo "## $name started at $(( s - T0 )) s" >> "$RES/steps.log"
  timeout "$limit" "$@" > "$RES/$name.log" 2>&1
  echo "## $name rc=$? took $(( $(date +%s) - s )) s" >> "$RES/steps.log"
}
BENCH="python3 -m course_kit bench"
GPU_TESTS="python3 -m pytest -m gpu -q -p no:cacheprovider --timeout=240"
nvidia-smi --query-gpu=name,driver_version,memory.used,utilization.gpu --format=csv > "$RES/gpu.txt" 2>&1

if [ "$PLAN" = check ]; then
  step gpu-tests-new 300 $GPU_TESTS ${CHECK_TESTS:-tests/test_profiling.py tests/test_lesson_traces.py tests/test_memory_snapshot.py}
  step bench-engine 240 $BENCH engine --out "$REF/h200"
  date +%s > "$ROOT/done"
  exit 0
fi

# 1. records (the notebooks read them)
step bench-traces 150 $BENCH traces --out "$REF/h200" --param "trace_dir=\"$REF/h200/traces\""
step bench-async 300 $BENCH async --out "$REF/h200"
step bench-amp 150 $BENCH amp --out "$REF/h200"
step bench-capstone 220 $BENCH capstone --out "$REF/h200"
for topic in ${EXTRA_TOPICS:-}; do
  step "bench-$topic" 180 $BENCH "$topic" --out "$REF/h200"
done
# 2. every H200 notebook, one at a time, on a quiet GPU (09 needs two GPUs: not here)
step record 1500 python3 -m course_kit record ${NOTEBOOKS:-00 01 02 03 04 05 06 07 08 10} --timeout 600 \
  --out "$REF/h200/notebooks"
# 3. the GPU tests, as far as the time goes
step gpu-tests 400 $GPU_TESTS tests
date +%s > "$ROOT/done"
