"""Issue 25, eighth session: does SwiGLU in w13's store (decode_kernels.step.SWIGLU_IN_W13) pay?
Reads decode_step_probe.py's JSON; exit 0 when its median step is no slower than the other's."""
import json
import statistics
import sys

rows = [r for r in json.load(open(sys.argv[1]))["step"] if "ms_per_token" in r]
on = [r["ms_per_token"] for r in rows if r["variant"].startswith("triton_graph_pdl")]
off = [r["ms_per_token"] for r in rows if r["variant"].startswith("swiglu in w2")]
print("in w13's store:", on, "in w2's load:", off)
sys.exit(0 if on and off and statistics.median(on) <= statistics.median(off) else 1)
