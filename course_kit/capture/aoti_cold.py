"""One cold start, in a fresh process: run as a script, `python aoti_cold.py '<json>'`, by `aoti.cold_start`.

It times what a server pays before its first answer, phase by phase: importing torch, then
- "aoti":    loading the `.pt2` package (`torch._inductor.aoti_load_package`) and calling it: no
             Python model code is imported, the graph and the weights are in the package;
- "compile": importing the course model, building it and wrapping its decode step in
             `torch.compile`, whose first call compiles (Dynamo, Inductor, a C++/Triton build);
- "eager":   importing and building the model, and calling it as it is.
Then the rest of the decode steps (their logits are saved for the parent to check against eager)
and the steady-state time of one call. The result is one JSON line on stdout.

Run as a file, this imports nothing of course_kit unless the mode needs the model ("compile",
"eager"): an AOTI server needs torch and the package, nothing else.
"""
import json
import sys
import time

T_START = time.perf_counter()


def _sync(torch, device):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _runner(args, torch):
    """The decode-step callable for this mode, and the seconds it took to get it."""
    t0 = time.perf_counter()
    if args["mode"] == "aoti":
        import torch._inductor
        args["inductor_import_s"] = time.perf_counter() - t0   # part of loading, reported apart
        fn = torch._inductor.aoti_load_package(args["package"])
        return fn, time.perf_counter() - t0
    sys.path.insert(0, args["root"])
    from course_kit.models.tiny_gpt import TinyGPT
    model = TinyGPT.from_preset(args["preset"], seed=args["seed"], device=args["device"]).eval()
    fn = torch.compile(model.decode) if args["mode"] == "compile" else model.decode
    return fn, time.perf_counter() - t0


def main(args):
    import torch
    t_import = time.perf_counter() - T_START
    if args.get("threads"):
        torch.set_num_threads(args["threads"])
    if args["device"].startswith("cuda"):
        torch.zeros(1, device=args["device"])          # the CUDA context: every mode pays it once
    t_context = time.perf_counter() - T_START - t_import
    fn, t_load = _runner(args, torch)
    dev, vocab = args["device"], args["vocab"]
    cache = [torch.zeros(args["cache_shape"], device=dev) for _ in range(args["layers"])]
    token = lambda i: torch.full((args["batch"],), (7 * i + 3) % vocab, device=dev)  # noqa: E731
    pos = lambda i: torch.tensor([i], device=dev)                                      # noqa: E731
    t0 = time.perf_counter()
    with torch.no_grad():
        logits = [fn(token(0), pos(0), cache)]
        _sync(torch, dev)
        t_first = time.perf_counter() - t0
        for i in range(1, args["steps"]):
            logits.append(fn(token(i), pos(i), cache))
        _sync(torch, dev)
        times = []
        for _ in range(args["repeat"]):
            t1 = time.perf_counter()
            fn(token(1), pos(1), cache)
            _sync(torch, dev)
            times.append(time.perf_counter() - t1)
    torch.save(torch.stack(logits).float().cpu(), args["out"])
    times.sort()
    print(json.dumps({"mode": args["mode"], "import_s": t_import, "context_s": t_context, "load_s": t_load,
                      "first_call_s": t_first, "cold_start_s": t_import + t_context + t_load + t_first,
                      "steady_s": times[len(times) // 2], "inductor_import_s": args.get("inductor_import_s"),
                      "threads": torch.get_num_threads(), "torch": torch.__version__}))


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
