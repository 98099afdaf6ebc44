"""Tuning runs for issue 25 under tensor parallelism: the Triton decode step on each rank's shard.

Each variant is the Triton step (course_kit/cuda_graphs/decode_kernels) on the TP shards of a model, with
its sums folded into the products (exchange="auto", decode_kernels/exchange.py) or with the
one-shot all-reduce after each row-parallel product (exchange=None), and module constants of
decode_kernels.gemv set for the run (PROGRAMS_PER_SM, TILE, NUM_WARPS: the block shapes of the
halved products). On GPUs each variant's step (with greedy decoding and the position update) is
captured in a CUDA graph and `--steps` replays are timed, the slowest rank's time counted; the
variants take turns for `--rounds` rounds, so drift shows as spread, not as a difference. Greedy
tokens are compared with the first variant's. On a CPU (gloo, the interpreter, float32, the tiny
preset) the same code runs eagerly: a smoke run of the script, not a measurement.

    python scripts/tp_decode_probe.py OUT.json [--models llama-1b,llama3-8b] [--world 2]
"""
from __future__ import annotations

import argparse
import json
import statistics

VARIANTS = [("folded", "auto", {}), ("all_reduce", None, {}),
            ("folded, 2 programs an SM", "auto", {"PROGRAMS_PER_SM": 2}),
            ("folded, 4 programs an SM", "auto", {"PROGRAMS_PER_SM": 4}),
            ("folded, tiles of 4096", "auto", {"TILE": 4096}),
            ("folded, tiles of 16384", "auto", {"TILE": 16384})]


def probe_rank(rank: int, world_size: int, models: list[str], variants: list, steps: int, rounds: int,
               prompt_len: int = 16) -> list[dict]:
    import torch
    import torch.distributed as dist

    from course_kit.cuda_graphs.decode_kernels import constants, gemv as G
    from course_kit.cuda_graphs.decode_kernels.step import TritonDecodeStep
    from course_kit.parallel import measure, oneshot

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda", torch.cuda.current_device()) if cuda else torch.device("cpu")
    dt = torch.bfloat16 if cuda else torch.float32
    rows = []
    for name in models:
        model = measure._build(name, dt, dev, seed=0)          # this rank's shard when world_size > 1
        loop = measure.GreedyLoop(model, prompt_len, steps + 1, dt, dev)
        fast = oneshot.enable_one_shot_all_reduce(max_numel=model.config.dim * 8, dtype=dt, device=dev) if cuda else None
        first_tokens = None
        for rnd in range(rounds):
            for label, exchange, knobs in variants:
                row = {"model": name, "variant": label, "round": rnd, "knobs": knobs}
                try:
                    with constants(knobs, G):      # set while the step is built, captured and run
                        step = TritonDecodeStep(model, exchange=exchange)
                        row["folded"] = step.exchange is not None
                        one = loop.step_of(step, step.greedy)
                        tokens, sec = loop.run(measure._graph(one).replay if cuda else one)
                    sec = torch.tensor([sec], dtype=torch.float64, device=dev)
                    if dist.is_initialized():
                        dist.all_reduce(sec, op=dist.ReduceOp.MAX)   # the slowest rank's time
                    first_tokens = first_tokens or tokens
                    row.update(ms_per_token=float(sec) * 1e3, tokens_equal_first=tokens == first_tokens)
                    if step.exchange is not None:
                        step.exchange.check()
                except Exception as exc:  # noqa: BLE001 - a variant that fails is a result
                    row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                rows.append(row)
        if fast is not None:
            oneshot.disable_one_shot_all_reduce()
        del model, loop
    return rows


def summary(rows: list[dict]) -> list[dict]:
    """Per model and variant: the median and the spread of ms per token over the rounds."""
    out = {}
    for r in rows:
        if "ms_per_token" in r:
            out.setdefault((r["model"], r["variant"]), []).append(r["ms_per_token"])
    return [{"model": m, "variant": v, "median_ms": statistics.median(t), "min_ms": min(t), "max_ms": max(t)}
            for (m, v), t in out.items()]


def main() -> None:
    from course_kit.parallel import launcher
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out")
    ap.add_argument("--models", default="llama-1b,llama3-8b")
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    rows = launcher.launch(probe_rank, args.world, args.models.split(","), VARIANTS, args.steps, args.rounds,
                           reuse=False, timeout_s=540)[0]
    result = {"rows": rows, "summary": summary(rows)}
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    for s in result["summary"]:
        print(json.dumps(s))
    for r in rows:
        if "error" in r or not r.get("tokens_equal_first", True):
            print(json.dumps(r))


if __name__ == "__main__":
    main()
