"""Issue 25 on one GPU: what TP=2 would cost a rank if communication were free.

The Triton step on llama-1b's TP=2 rank-0 shard alone (`shard_llama(rank_of=(0, 2))` with no
process group, so the step runs it as one GPU's model: no exchange and no sums, wrong numbers, the
right kernels and bytes), beside the whole model, over gemv's block knobs; each captured in a CUDA
graph and timed over 64 greedy steps, three rounds in turn. Its tenth-session run is
data/reference/h200/logs/tp2-shard-compute-s10.json.

    python scripts/tp_shard_compute.py OUT.json [preset]     (on a CPU: the tiny preset, a smoke run)
"""
import json, statistics, sys
import torch
from course_kit.cuda_graphs.decode_kernels import constants, gemv as G
from course_kit.cuda_graphs.decode_kernels.step import TritonDecodeStep
from course_kit.parallel import measure
from course_kit.parallel.tp_llama import shard_llama

cuda = torch.cuda.is_available()
dev, dt = (torch.device("cuda"), torch.bfloat16) if cuda else (torch.device("cpu"), torch.float32)
name = sys.argv[2] if len(sys.argv) > 2 else "llama-1b"
full = measure._build(name, dt, dev, seed=0)
shard = shard_llama(full, rank_of=(0, 2))
models = {"whole": full, "tp2 shard": shard}
steps = 65 if cuda else 3
loops = {n: measure.GreedyLoop(m, 16, steps, dt, dev) for n, m in models.items()}
variants = [("default", {}), ("2 an SM", {"PROGRAMS_PER_SM": 2}), ("4 an SM", {"PROGRAMS_PER_SM": 4}),
            ("tiles 4096", {"TILE": 4096}), ("tiles 16384", {"TILE": 16384}), ("8 warps", {"NUM_WARPS": 8})]
times, rows = {}, []
with torch.no_grad():
    for rnd in range(3 if cuda else 1):
        for mname, model in models.items():
            for vname, knobs in variants:
                with constants(knobs, G):      # set while the step is built, captured and run
                    step = TritonDecodeStep(model, exchange=None)
                    loop = loops[mname]
                    one = loop.step_of(step, step.greedy)
                    _, sec = loop.run(measure._graph(one).replay if cuda else one)
                times.setdefault((mname, vname), []).append(sec * 1e3)
for (m, v), t in times.items():
    rows.append({"model": m, "variant": v, "median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t)})
    print(json.dumps(rows[-1]), flush=True)
json.dump({"rows": rows, "gpu": torch.cuda.get_device_name() if cuda else "cpu"}, open(sys.argv[1], "w"), indent=1)
