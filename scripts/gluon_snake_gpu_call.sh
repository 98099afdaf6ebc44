#!/usr/bin/env bash
# Issue 26, session 12: do persistent programs that take their items in snake order pay?
#   . .whl/activate.sh && bash scripts/gluon_snake_gpu_call.sh          (one H200; up to 10 minutes)
# 1. the probe's matrix (persistent round-robin, persistent snake, a program an item: checked against
#    float64, then timed beside cuDNN and SDPA flash in one run at six shapes);
# 2. only if the default kernel (the faster of persistent and a program an item) is faster with snake
#    order at the acceptance shape: `bench attention` (the record, at this commit, where snake order
#    is the default), the Gluon GPU tests, and notebook 08 recorded while time is left.
set -uo pipefail
SECONDS=0
L="$OUT/h200/logs"; mkdir -p "$L"
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv > "$L/gpu-state-s12b.txt"
timeout 200 python3 scripts/gluon_attn_probe.py "$L/gluon-attn-9-s12.json" --matrix > "$L/gluon-attn-9-s12.log" 2>&1
echo "probe rc=$? at ${SECONDS}s"
python3 - "$L/gluon-attn-9-s12.json.partial.jsonl" <<'PY' | tee "$L/snake-verdict-s12.txt"
import json, sys
rows = [json.loads(line) for line in open(sys.argv[1])]
checks = all(r["checks_ok"] for r in rows if "checks_ok" in r)
print("checks_ok:", checks)
win = False
for r in rows:
    if "shape" not in r or "sdpa cudnn" not in r:
        continue
    old, new = max(r["persistent round-robin"], r["per-tile"]), max(r["persistent snake"], r["per-tile"])
    print(r["shape"], " ".join(f"{k} {r[k]:.0f}" for k in ("persistent round-robin", "persistent snake", "per-tile",
                                                          "sdpa cudnn", "sdpa flash")),
          f"| default {old:.0f} -> {new:.0f} ({new / old:.3f}x), {new / r['sdpa cudnn']:.3f}x cudnn")
    if r["shape"] == [4, 16, 4096, 128, True]:
        win = checks and new > 1.005 * old
print("WIN" if win else "NO WIN")
PY
if grep -qx WIN "$L/snake-verdict-s12.txt"; then
  timeout 200 python3 -m course_kit bench attention --out "$OUT/h200" > "$L/bench-attention-s12.log" 2>&1
  echo "bench rc=$? at ${SECONDS}s"
  python3 -c "import json; s=json.load(open('$OUT/h200/attention.json'))['summary']; print({k: s[k] for k in s if 'cudnn' in k or 'flash' in k})"
  timeout 150 python3 -m pytest -m gpu tests/test_gluon_flash.py -q -p no:cacheprovider --timeout=120 \
    > "$L/gpu-tests-gluon-s12.log" 2>&1
  echo "gluon tests rc=$? at ${SECONDS}s"; tail -2 "$L/gpu-tests-gluon-s12.log"
  if [ "$SECONDS" -lt 330 ]; then
    timeout $((585 - SECONDS)) python3 -m course_kit record 08 --timeout 300 --out "$OUT/h200/notebooks" \
      > "$L/record-h200-08-s12.log" 2>&1
    echo "record 08 rc=$? at ${SECONDS}s"; tail -2 "$L/record-h200-08-s12.log"
  fi
fi
