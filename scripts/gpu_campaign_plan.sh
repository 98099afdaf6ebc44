#!/usr/bin/env bash
# The steps of one GPU session on ONE H200, run by scripts/gpu_campaign.sh from its own copy of the
# repository. Everything runs alone on the GPU, one step at a time (DESIGN.md: a recorded run is
# alone on its GPU): benches first, writing straight into that copy's data/reference/h200/ so that
# the notebooks recorded afterwards read the new records; then every H200 notebook, one at a time
# (course-kit record checks the GPU is quiet and stamps it); then the GPU tests. Each step has its
# own time limit and log; a step that fails or runs out of time is logged and the plan goes on.
#   PLAN=check   a short first call: the new GPU code's tests, and the records that shape later work
#   PLAN=short   under 20 device minutes: the records no earlier session made, then the new GPU tests
#   PLAN=notebooks every H200 notebook alone (about 1,300 s), then a few GPU tests
#   PLAN=rerecord the async blog case and capstone with the profiler, every notebook alone, the GPU tests
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

if [ "$PLAN" = short ]; then   # a session with under 20 device minutes: the records nothing else gives
  step bench-traces 100 $BENCH traces --out "$REF/h200" --param "trace_dir=\"$REF/h200/traces\""
  step bench-async 150 $BENCH async --out "$REF/h200" --param 'models=["llama-1b"]' --param 'batches=[16]' \
    --param blog=false
  step bench-woq 140 $BENCH woq --out "$REF/h200"
  step bench-speculative 120 $BENCH speculative --out "$REF/h200"
  step bench-capstone 200 $BENCH capstone --out "$REF/h200" --param n_requests=32
  step bench-engine 120 $BENCH engine --out "$REF/h200"
  step bench-amp 120 $BENCH amp --out "$REF/h200"
  step gpu-tests 240 $GPU_TESTS ${FINAL_TESTS:-tests/test_woq_gemv.py tests/test_woq_decode.py tests/test_speculative.py \
    tests/test_profiling.py tests/test_lesson_traces.py}
  date +%s > "$ROOT/done"
  exit 0
fi

if [ "$PLAN" = notebooks ]; then   # every H200 notebook alone, nothing else first: on 2026-12-02 they took
  # 00 17 s, 01 104, 02 73, 03 39, 04 >156 (stopped), 05 109, 06 228, 07 227 s, 08 >200: about 1,300 s with 08
  # and 10, so a 30-minute session holds them and little more; the order puts the oldest copies first
  step record 1500 python3 -m course_kit record ${NOTEBOOKS:-04 08 10 07 06 05 01 02 03 00} --timeout 300 \
    --out "$REF/h200/notebooks"
  step gpu-tests 300 $GPU_TESTS ${FINAL_TESTS:-tests/test_aoti.py tests/test_cuda_graphs.py tests/test_compile_modes.py}
  date +%s > "$ROOT/done"
  exit 0
fi

if [ "$PLAN" = rerecord ]; then   # issue 40/41: the records the profiler still lacks, then every notebook alone
  step bench-async 330 $BENCH async --out "$REF/h200" --param 'models=["llama-1b"]' --param 'batches=[16]' \
    --param blog=true
  step bench-capstone 300 $BENCH capstone --out "$REF/h200" --param n_requests=32 --param profile_tokens=32
  python3 -m course_kit.benchtable --write > "$RES/benchtable.log" 2>&1
  step record 1000 python3 -m course_kit record ${NOTEBOOKS:-07 10 01 03 05 08 02 06 00 04} --timeout 300 \
    --out "$REF/h200/notebooks"
  step gpu-tests 400 $GPU_TESTS ${FINAL_TESTS:-tests}
  step bench-fp8_train 90 $BENCH fp8_train --out "$REF/h200"
  step bench-aoti 100 $BENCH aoti --out "$REF/h200"
  date +%s > "$ROOT/done"
  exit 0
fi

# 1. records the notebooks read: issue 40's first (traces, GPU idle, memory), then the GPU issues'
step bench-traces 120 $BENCH traces --out "$REF/h200" --param "trace_dir=\"$REF/h200/traces\""
step bench-async 180 $BENCH async --out "$REF/h200" --param 'batches=[16, 64]'
step bench-amp 120 $BENCH amp --out "$REF/h200"
step bench-capstone 180 $BENCH capstone --out "$REF/h200"
step bench-woq 160 $BENCH woq --out "$REF/h200"
step bench-engine 140 $BENCH engine --out "$REF/h200"
step bench-speculative 130 $BENCH speculative --out "$REF/h200"
step bench-fp8_train 90 $BENCH fp8_train --out "$REF/h200"
step bench-aoti 100 $BENCH aoti --out "$REF/h200"
python3 -m course_kit.benchtable --write > "$RES/benchtable.log" 2>&1
# 2. every H200 notebook, one at a time, on a quiet GPU (09 needs two GPUs: not lent this session)
step record 900 python3 -m course_kit record ${NOTEBOOKS:-07 10 01 08 03 05 02 06 00 04} --timeout 600 \
  --out "$REF/h200/notebooks"
# 3. the GPU tests of this session's new code, as far as the time goes
step gpu-tests 400 $GPU_TESTS ${FINAL_TESTS:-tests/test_profiling.py tests/test_lesson_traces.py \
  tests/test_memory_snapshot.py tests/test_woq_gemv.py tests/test_woq_decode.py tests/test_fp8.py tests/test_dtypes.py \
  tests/test_async_loop.py tests/test_capstone.py tests/test_amp.py tests/test_speculative.py}
date +%s > "$ROOT/done"
