#!/usr/bin/env bash
# Issue 26, session 12: does the Gluon forward's intra-warpgroup overlap (gluon_flash OVERLAP) pay?
#   . .whl/activate.sh && bash scripts/gluon_overlap_gpu_call.sh          (one H200; ~7 minutes)
# 1. the probe's matrix (overlap or not x persistent or a program an item, checked against float64,
#    then timed beside cuDNN and SDPA flash in one run at four shapes);
# 2. only if overlap is faster at the acceptance shape: `bench attention` (the record, at this
#    commit, where overlap is the default) and the Gluon GPU tests.
set -uo pipefail
L="$OUT/h200/logs"; mkdir -p "$L"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$L/gpu-state-s12.txt"
timeout 260 python3 scripts/gluon_attn_probe.py "$L/gluon-attn-8-s12.json" --matrix > "$L/gluon-attn-8-s12.log" 2>&1
echo "probe rc=$?"
python3 - "$L/gluon-attn-8-s12.json.partial.jsonl" <<'PY' | tee "$L/overlap-verdict-s12.txt"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
print("checks_ok:", [r["checks_ok"] for r in rows if "checks_ok" in r])
win = False
for r in rows:
    if "shape" not in r or "sdpa cudnn" not in r:
        continue
    with_ = max(v for k, v in r.items() if k.startswith("pingpong q2 overlap"))
    without = max(v for k, v in r.items() if k.startswith("pingpong q2") and "overlap" not in k)
    print(r["shape"], f"overlap {with_:.0f} without {without:.0f} ({with_ / without:.3f}x) cudnn {r['sdpa cudnn']:.0f}"
          f" -> {with_ / r['sdpa cudnn']:.3f}x cudnn")
    if r["shape"] == [4, 16, 4096, 128, True]:
        win = with_ > 1.005 * without and all(r2.get("checks_ok", True) for r2 in rows)
print("WIN" if win else "NO WIN")
PY
if grep -qx WIN "$L/overlap-verdict-s12.txt"; then
  timeout 240 python3 -m course_kit bench attention --out "$OUT/h200" > "$L/bench-attention-s12.log" 2>&1
  echo "bench rc=$?"
  timeout 200 python3 -m pytest -m gpu tests/test_gluon_flash.py -q -p no:cacheprovider --timeout=150 \
    > "$L/gpu-tests-gluon-s12.log" 2>&1
  echo "gluon tests rc=$?"; tail -3 "$L/gpu-tests-gluon-s12.log"
  python3 -c "import json; s=json.load(open('$OUT/h200/attention.json'))['summary']; print({k: s[k] for k in s if 'cudnn' in k or 'flash' in k})"
fi
