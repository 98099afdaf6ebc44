#!/usr/bin/env bash
# Issue 26: the attention record and notebook 08 on one H200, at this commit.
#   . .whl/activate.sh && bash scripts/gluon_record_gpu_call.sh LOG_SUFFIX     (up to 10 minutes)
# `bench attention`, then notebook 08 recorded against that new record (copied into this machine's
# tree first: 08's reference cells read data/reference/h200/attention.json, and session 14's first
# call recorded 08 against the old one), then the attention GPU tests while time is left. At most
# eight files come back from the machine, so everything lands in three folders and few files.
set -uo pipefail
SECONDS=0
S=${1:?name the log suffix, e.g. s15, so that every call keeps its own logs}
L="$OUT/h200/logs"; mkdir -p "$L"
timeout 220 python3 -m course_kit bench attention --out "$OUT/h200" > "$L/bench-attention-$S.log" 2>&1
echo "bench rc=$? at ${SECONDS}s"
python3 -c "import json; s=json.load(open('$OUT/h200/attention.json'))['summary']; print({k: s[k] for k in ('triton_over_cudnn', 'meets_cudnn_target', 'fwd_bwd_triton_over_flash', 'sweep_min_over_flash_graph', 'sweep_min_over_flash_per_call')}, s['tflops_at_acceptance'])" \
  && cp "$OUT/h200/attention.json" data/reference/h200/attention.json
timeout 230 python3 -m course_kit record 08 --timeout 220 --out "$OUT/h200/notebooks" > "$L/record-h200-08-$S.log" 2>&1
echo "record 08 rc=$? at ${SECONDS}s"; tail -1 "$L/record-h200-08-$S.log"
timeout $((590 - SECONDS)) python3 -m pytest -m gpu tests/test_gluon_flash.py tests/test_attention_triton.py \
  tests/test_attention_bench.py tests/test_attention_sdpa.py -q -p no:cacheprovider --timeout=200 \
  > "$L/gpu-tests-attention-$S.log" 2>&1
echo "attention tests rc=$? at ${SECONDS}s"; tail -2 "$L/gpu-tests-attention-$S.log"
