"""Measure the Triton flash-attention kernel's variants on one GPU, to choose its defaults.

Every variant is checked against SDPA before it is timed; each row of the JSON written to the
path given (default attn_tune.json) is one (variant, shape) with its median time and TFLOP/s.
Peers (SDPA flash, cuDNN) are timed in the same run on the same inputs. Used by hand on the
reference H200 (issue 26); the results that the package adopts are re-measured by
`course-kit bench attention`. Its two runs of the sixth session are kept in
data/reference/h200/logs/attn-tune-{1,2}-s6.json; they were made with this script at c8beef2 and
with a later version that also timed two forward variants since dropped from the kernel (Triton's
warp-specialised loop, and the next block's scores issued before this block's softmax).

    python scripts/attn_tune.py out.json [--budget-s 480]
"""
from __future__ import annotations

import argparse
import itertools
import json
import time

import torch

from course_kit import bench
from course_kit.attention import naive, sdpa_backends, triton_flash, triton_flash_bwd
from course_kit.attention.triton_flash import DEVICE_DESC, HOST_DESC, POINTER
from course_kit.benchmarks.attention_steps import _inputs

FWD_CONFIGS = [(64, 64, 4, 3), (64, 64, 4, 2), (64, 128, 4, 2), (64, 128, 4, 3), (64, 32, 4, 3), (64, 32, 4, 4),
               (128, 128, 8, 3), (128, 64, 8, 3)]
DKDV = [(32, 64, 4, 3), (32, 64, 4, 2), (32, 64, 4, 4), (16, 64, 4, 3), (32, 32, 4, 3), (64, 64, 4, 2)]
DQ = [(128, 64, 8, 3), (128, 64, 8, 4), (64, 64, 4, 2), (128, 32, 8, 3)]


def inputs(b, h, s, d, seed, grad=False):
    """The bench's own inputs (q, k, v in bf16 on the GPU); with grad, leaves and an incoming dO."""
    xs = _inputs(b, h, h, s, d, torch.bfloat16, torch.device("cuda"), seed)
    if grad:
        xs = tuple(x.requires_grad_() for x in xs) + (torch.randn_like(xs[0]),)
    return xs


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="attn_tune.json")
    ap.add_argument("--budget-s", type=float, default=480)
    ap.add_argument("--fwd-configs", help="BM,BN,warps,stages[,maxnreg];... instead of FWD_CONFIGS")
    ap.add_argument("--descs", default="2,1,0", help="loaders to try: 2 host, 1 device, 0 pointer")
    ap.add_argument("--fwd-only", action="store_true", help="the acceptance shape and S=16k only")
    args = ap.parse_args()
    configs = FWD_CONFIGS if not args.fwd_configs else [
        tuple(int(x) for x in c.split(",")) for c in args.fwd_configs.split(";")]
    descs = [int(d) for d in args.descs.split(",")]
    t_start = time.time()
    rows: list[dict] = []

    def save():
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "seconds": time.time() - t_start,
                       "gpu": torch.cuda.get_device_name(), "triton": triton_flash.triton.__version__,
                       "torch": torch.__version__}, f, indent=1)

    def left() -> float:
        return args.budget_s - (time.time() - t_start)

    def time_fwd(name, fn, shape, extra=None):
        b, h, s, d, causal = shape
        sets = [inputs(b, h, s, d, 10 + i) for i in range(2)]
        row = {"pass": "fwd", "variant": name, "shape": shape, **(extra or {})}
        try:
            ref = sdpa_backends.sdpa(*sets[0], backend="flash", causal=causal)
            err = (fn(*sets[0], causal) - ref).abs().max().item()
            row["max_abs_err_vs_flash"] = err
            if not err < 3e-2:
                row["error"] = f"wrong result: {err}"
            else:
                t = bench.timeit(lambda q, k, v: fn(q, k, v, causal), warmup=3, repeat=20, inputs=sets)
                row["median_s"] = t.median_s
                row["tflops"] = naive.attention_flops(b, h, s, s, d, causal=causal) / t.median_s / 1e12
        except Exception as exc:  # noqa: BLE001 - record it: a config that fails is a result too
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        rows.append(row)
        print(json.dumps(row), flush=True)
        save()
        return row

    def pinned(desc, cfg):
        bm, bn, w, st = cfg[:4]
        conf = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": st}
        if len(cfg) > 4:
            conf["maxnreg"] = cfg[4]
        return lambda q, k, v, c: triton_flash.launch_forward(q, k, v, causal=c, scale=None, desc=desc,
                                                               config=conf)[0]

    acceptance = (4, 16, 4096, 128, True)
    peers = {"sdpa flash": lambda q, k, v, c: sdpa_backends.sdpa(q, k, v, backend="flash", causal=c),
             "sdpa cudnn": lambda q, k, v, c: sdpa_backends.sdpa(q, k, v, backend="cudnn", causal=c)}
    # 1. the forward's variants at the acceptance shape
    for name, fn in peers.items():
        time_fwd(name, fn, acceptance)
    fwd_rows = []
    for desc, cfg in itertools.product(descs, configs):
        if left() < 330:
            continue
        fwd_rows.append(time_fwd(f"fwd desc={desc} cfg={cfg}", pinned(desc, cfg), acceptance,
                                 {"desc": desc, "cfg": cfg}))
    good = sorted((r for r in fwd_rows if "tflops" in r), key=lambda r: -r["tflops"])[:3]
    if args.fwd_only:
        long = (4, 16, 16384, 128, True)
        for name, fn in peers.items():
            time_fwd(name, fn, long)
        for r in good:
            time_fwd(r["variant"], pinned(r["desc"], r["cfg"]), long, {"desc": r["desc"], "cfg": r["cfg"]})
        save()
        return
    overhead(rows)

    # 2. the best few on the other shapes of the sweep, with the peers and the autotuned kernel
    for shape in [(4, 16, 512, 128, True), (4, 16, 1024, 128, True), (4, 16, 16384, 128, True),
                  (4, 16, 4096, 64, True), (4, 16, 1024, 64, True), (4, 16, 16384, 128, False),
                  (4, 16, 1024, 128, False), (4, 16, 512, 64, False)]:
        if left() < 150:
            break
        for name, fn in peers.items():
            time_fwd(name, fn, shape)
        time_fwd("autotuned (current defaults)", lambda q, k, v, c: triton_flash.flash_attention(q, k, v, causal=c),
                 shape)
        for r in good:
            cfg = list(r["cfg"])
            if shape[3] == 64 and cfg[1] > 64:
                continue
            time_fwd(r["variant"], pinned(r["desc"], cfg), shape, {"desc": r["desc"], "cfg": cfg})

    # 3. the backward: each dK/dV config with one dQ config, then each dQ config with the best dK/dV
    b, h, s, d, causal = acceptance
    sets = [inputs(b, h, s, d, 20 + i) for i in range(2)]
    do = [torch.randn_like(x[0]) for x in sets]
    fwd = [triton_flash.flash_attention(*x, causal=True, return_lse=True) for x in sets]
    bw_sets = [(*x, o, lse, g) for x, (o, lse), g in zip(sets, fwd, do)]
    ref = [t.grad for t in _sdpa_grads(sets[0], do[0])]

    def time_bwd(name, configs):
        row = {"pass": "bwd", "variant": name, "shape": acceptance, "configs": configs}
        try:
            grads = triton_flash_bwd.flash_attention_backward(*bw_sets[0], causal=True, configs=configs)
            row["max_rel_err_vs_flash"] = max(((gr.float() - r.float()).abs().max() / r.float().abs().max()).item()
                                              for gr, r in zip(grads, ref))
            t = bench.timeit(lambda q, k, v, o, lse, g: triton_flash_bwd.flash_attention_backward(
                q, k, v, o, lse, g, causal=True, configs=configs), warmup=2, repeat=10, inputs=bw_sets)
            row["median_s"] = t.median_s
            row["tflops"] = 2.5 * naive.attention_flops(b, h, s, s, d, causal=True) / t.median_s / 1e12
        except Exception as exc:  # noqa: BLE001
            row["error"] = f"{type(exc).__name__}: {exc}"[:400]
        rows.append(row)
        print(json.dumps(row), flush=True)
        save()
        return row

    def conf(c):
        return {"BLOCK_M": c[0], "BLOCK_N": c[1], "num_warps": c[2], "num_stages": c[3]}
    dk_rows = [time_bwd(f"bwd dkdv={c} dq={DQ[0]}", {"dkdv": conf(c), "dq": conf(DQ[0])}) for c in DKDV if left() > 60]
    best_dk = min((r for r in dk_rows if "median_s" in r), key=lambda r: r["median_s"], default=None)
    if best_dk:
        for c in DQ[1:]:
            if left() > 40:
                time_bwd(f"bwd dkdv=best dq={c}", {"dkdv": best_dk["configs"]["dkdv"], "dq": conf(c)})
    # fwd+bwd against the peers, as the bench times it
    for name, fn in {"triton": lambda q, k, v: triton_flash_bwd.flash_attention_trainable(q, k, v, causal=True),
                     **{n: (lambda bk: lambda q, k, v: sdpa_backends.sdpa(q, k, v, backend=bk, causal=True))(n[5:])
                        for n in peers}}.items():
        if left() < 15:
            break
        gsets = [inputs(b, h, s, d, 30 + i, grad=True) for i in range(2)]
        try:
            t = bench.timeit(lambda q, k, v, g: fn(q, k, v).backward(g), warmup=2, repeat=10, inputs=gsets)
            row = {"pass": "fwd+bwd", "variant": name, "shape": acceptance, "median_s": t.median_s,
                   "tflops": 3.5 * naive.attention_flops(b, h, s, s, d, causal=True) / t.median_s / 1e12}
        except Exception as exc:  # noqa: BLE001
            row = {"pass": "fwd+bwd", "variant": name, "error": f"{type(exc).__name__}: {exc}"[:400]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    save()


def overhead(rows: list) -> None:
    """Host time per call, no synchronisation (what bounds a short kernel), and a profile."""
    import cProfile
    import io
    import pstats
    b, h, s, d = 4, 16, 512, 128
    q, k, v = inputs(b, h, s, d, 3)
    calls = {
        "sdpa flash (course wrapper)": lambda: sdpa_backends.sdpa(q, k, v, backend="flash", causal=True),
        "F.sdpa (default choice)": lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
        "flash_attention auto": lambda: triton_flash.flash_attention(q, k, v, causal=True),
        "flash_attention pointer": lambda: triton_flash.flash_attention(q, k, v, causal=True, loader="pointer"),
    }
    for desc in (POINTER, DEVICE_DESC, HOST_DESC):
        conf = {"BLOCK_M": 64, "BLOCK_N": 64, "num_warps": 4, "num_stages": 3}
        calls[f"launch_forward pinned desc={desc}"] = (lambda dd, cc: lambda: triton_flash.launch_forward(
            q, k, v, causal=True, scale=None, desc=dd, config=cc))(desc, conf)
    for name, fn in calls.items():
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
        n = 200
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        host = (time.perf_counter() - t0) / n
        torch.cuda.synchronize()
        row = {"pass": "overhead", "variant": name, "host_us_per_call": host * 1e6, "shape": [b, h, s, d, True]}
        rows.append(row)
        print(json.dumps(row), flush=True)
    prof = cProfile.Profile()
    prof.enable()
    for _ in range(200):
        triton_flash.flash_attention(q, k, v, causal=True)
    prof.disable()
    torch.cuda.synchronize()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(25)
    rows.append({"pass": "profile", "variant": "flash_attention auto x200", "text": out.getvalue()[-6000:]})
    print(out.getvalue()[-6000:], flush=True)


def _sdpa_grads(xs, do):
    leaves = [x.detach().clone().requires_grad_() for x in xs]
    sdpa_backends.sdpa(*leaves, backend="flash", causal=True).backward(do)
    return leaves


if __name__ == "__main__":
    main()
