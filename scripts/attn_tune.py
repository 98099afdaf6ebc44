"""Measure the Triton flash-attention kernel's variants on one GPU, to choose its defaults.

Every variant is checked against SDPA before it is timed; each row of the JSON written to the
path given (default attn_tune.json) is one (variant, shape) with its median time and TFLOP/s.
Peers (SDPA flash, cuDNN) are timed in the same run on the same inputs. Used by hand on the
reference H200 (issue 26); the results that the package adopts are re-measured by
`course-kit bench attention`.

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

FWD_CONFIGS = [(128, 64, 8, 3), (128, 64, 8, 4), (128, 64, 8, 2), (128, 128, 8, 2), (128, 128, 8, 3),
               (64, 64, 4, 3), (64, 64, 4, 4)]
DKDV = [(64, 128, 8, 2), (64, 128, 8, 3), (32, 128, 8, 3), (32, 128, 4, 4), (64, 64, 4, 3), (32, 64, 4, 3),
        (128, 128, 8, 2)]
DQ = [(128, 64, 8, 2), (128, 64, 8, 3), (128, 32, 8, 3), (128, 32, 4, 4), (64, 64, 4, 3), (64, 32, 4, 3),
      (128, 128, 8, 2)]


def inputs(b, h, s, d, seed, grad=False):
    g = torch.Generator(device="cuda").manual_seed(seed)
    xs = [torch.randn(b, h, s, d, generator=g, device="cuda", dtype=torch.bfloat16) for _ in range(3)]
    if grad:
        xs = [x.requires_grad_() for x in xs] + [torch.randn_like(xs[0])]
    return tuple(xs)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", nargs="?", default="attn_tune.json")
    ap.add_argument("--budget-s", type=float, default=480)
    args = ap.parse_args()
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

    def pinned(desc, ws, cfg):
        bm, bn, w, st = cfg[:4]
        conf = {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": w, "num_stages": st}
        if len(cfg) > 4:
            conf["maxnreg"] = cfg[4]
        return lambda q, k, v, c: triton_flash.launch_forward(q, k, v, causal=c, scale=None, desc=desc,
                                                               warp_spec=ws, config=conf)[0]

    acceptance = (4, 16, 4096, 128, True)
    peers = {"sdpa flash": lambda q, k, v, c: sdpa_backends.sdpa(q, k, v, backend="flash", causal=c),
             "sdpa cudnn": lambda q, k, v, c: sdpa_backends.sdpa(q, k, v, backend="cudnn", causal=c)}
    # 1. the forward's variants at the acceptance shape
    for name, fn in peers.items():
        time_fwd(name, fn, acceptance)
    fwd_rows = []
    for desc, ws, cfg in itertools.product((HOST_DESC, DEVICE_DESC, POINTER), (False, True), FWD_CONFIGS):
        if ws and desc == POINTER or left() < 300:
            continue
        fwd_rows.append(time_fwd(f"fwd desc={desc} ws={ws} cfg={cfg}", pinned(desc, ws, cfg), acceptance,
                                 {"desc": desc, "ws": ws, "cfg": cfg}))
    for cfg in ((128, 64, 8, 2, 128), (128, 64, 8, 3, 128)):   # two programs per SM, if registers allow
        fwd_rows.append(time_fwd(f"fwd desc=2 ws=False cfg={cfg}", pinned(HOST_DESC, False, cfg), acceptance,
                                 {"desc": HOST_DESC, "ws": False, "cfg": cfg}))
    good = sorted((r for r in fwd_rows if "tflops" in r), key=lambda r: -r["tflops"])[:4]

    # 2. the best few on the other shapes of the sweep, with the peers and the autotuned kernel
    for shape in [(4, 16, 512, 128, True), (4, 16, 1024, 128, True), (4, 16, 16384, 128, True),
                  (4, 16, 4096, 64, True), (4, 16, 1024, 64, True), (4, 16, 4096, 128, False),
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
            time_fwd(r["variant"], pinned(r["desc"], r["ws"], cfg), shape, {"desc": r["desc"], "ws": r["ws"], "cfg": cfg})

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


def _sdpa_grads(xs, do):
    leaves = [x.detach().clone().requires_grad_() for x in xs]
    sdpa_backends.sdpa(*leaves, backend="flash", causal=True).backward(do)
    return leaves


if __name__ == "__main__":
    main()
