"""CUDA streams and events, demonstrated and measured on a GPU.

Each demo returns a plain dict: the measured times, whether the result was correct, and a
`Timeline` of what ran on which stream (from CUDA events), ready for `plots.streams.gantt`.

- `concurrency_demo`: independent kernels queued on one stream run one after another (a stream is a
  FIFO; PyTorch's work goes to the legacy default stream unless you pick another), while the same
  kernels on separate streams can run at the same time.
- `legacy_default_stream_demo`: the legacy default stream also waits for, and is waited on by,
  every *blocking* stream; PyTorch's own streams are non-blocking and escape that.
- `missing_wait_demo`: a consumer stream reading what a producer stream has not written yet, and the
  fix (`wait_event` / `wait_stream`).
- `missing_record_stream_demo`: a tensor freed on the host while a side stream still has to read it;
  the caching allocator hands its memory to the next allocation, which overwrites it; the fix is
  `Tensor.record_stream`.
- `copy_overlap_demo`: host-to-device copies from pinned memory with `non_blocking=True` on a copy
  stream overlap compute; copies from pageable memory block the host and cannot.
"""
from __future__ import annotations

import time

import torch

from .recorder import EventRecorder
from ..device import compute_dtype, has_cuda


def _need_cuda() -> None:
    if not has_cuda():
        raise RuntimeError("this demonstration needs a CUDA GPU; on a CPU the notebook shows the "
                           "recorded H200 results (course_kit.notebook.gpu_only('streams'))")


def spin(cycles: int) -> None:
    """A one-thread kernel that busy-waits `cycles` GPU clocks: long, and leaves the GPU free."""
    # torch.cuda._sleep is private but has existed since torch 1.x; it occupies one SM thread only,
    # so concurrency between streams shows cleanly.
    torch.cuda._sleep(int(cycles))


def cycles_per_ms() -> float:
    """Measure how many `spin` cycles take one millisecond on this GPU."""
    _need_cuda()
    spin(1000)
    torch.cuda.synchronize()
    n = 2_000_000
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record()
    spin(n)
    e1.record()
    torch.cuda.synchronize()
    return n / max(e0.elapsed_time(e1), 1e-3)


def _work(kind: str, arg) -> None:
    if kind == "spin":
        spin(arg)
    elif kind == "matmul":
        a, b, reps = arg
        for _ in range(reps):
            torch.mm(a, b)
    else:
        raise ValueError(f"kind {kind!r} not in ('spin', 'matmul')")


def concurrency_demo(n_streams: int = 4, kind: str = "spin", kernel_ms: float = 2.0,
                     matmul_size: int = 512, matmul_reps: int = 50) -> dict:
    """Run `n_streams` independent pieces of work on one stream, then on one stream each."""
    _need_cuda()
    if n_streams < 1:
        raise ValueError(f"n_streams={n_streams}; it must be >= 1")
    if kind == "spin":
        arg = int(kernel_ms * cycles_per_ms())
    elif kind == "matmul":
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(matmul_size, matmul_size, device="cuda", dtype=compute_dtype(), generator=g)
        arg = (a, a.T.contiguous(), matmul_reps)
    else:
        raise ValueError(f"kind {kind!r} not in ('spin', 'matmul')")
    streams = [torch.cuda.Stream() for _ in range(n_streams)]
    for s in [torch.cuda.current_stream()] + streams:   # warm-up: modules, cuBLAS handles per stream
        with torch.cuda.stream(s):
            _work(kind, arg)
    torch.cuda.synchronize()

    out: dict = {"n_streams": n_streams, "kind": kind}
    for mode in ("one stream", "one stream each"):
        rec = EventRecorder()
        main = torch.cuda.current_stream()
        t0 = rec.mark_gpu(main)
        for i in range(n_streams):
            s = main if mode == "one stream" else streams[i]
            if s is not main:
                s.wait_stream(main)  # inputs were made on the main stream
            with torch.cuda.stream(s), rec.gpu(f"stream {i}" if s is not main else "default",
                                               f"work {i}", s):
                _work(kind, arg)
        for s in streams:
            main.wait_stream(s)  # the main stream continues once everything is done
        t1 = rec.mark_gpu(main)
        rec.add_gpu("total", mode, t0, t1)
        tl = rec.finish()
        out[mode] = {"ms": t0.elapsed_time(t1), "timeline": tl.shifted()}
    out["speedup"] = out["one stream"]["ms"] / out["one stream each"]["ms"]
    return out


_BLOCKING: list = []


def _cudart():
    """The CUDA runtime library torch itself loaded (found in /proc/self/maps), via ctypes."""
    import ctypes
    import glob
    import os
    torch.cuda.init()
    paths = []
    try:
        with open("/proc/self/maps") as f:
            paths += [line.split()[-1] for line in f if "libcudart.so" in line]
    except OSError:
        pass
    for root in {os.path.dirname(os.path.dirname(torch.__file__))}:
        paths += sorted(glob.glob(os.path.join(root, "nvidia", "**", "libcudart.so*"), recursive=True))
    for path in paths + ["libcudart.so"]:
        try:
            return ctypes.CDLL(path)
        except OSError:
            continue
    return None


def blocking_streams(n: int = 2) -> list | None:
    """`n` *blocking* streams (plain `cudaStreamCreate`), or None where the runtime is not reachable.

    PyTorch creates its own streams with `cudaStreamNonBlocking`; a blocking stream is what a C++
    library may hand you, and it synchronises implicitly with the legacy default stream.
    """
    import ctypes
    while len(_BLOCKING) < n:
        lib = _cudart()
        if lib is None:
            return None
        handle = ctypes.c_void_p()
        if lib.cudaStreamCreate(ctypes.byref(handle)) != 0 or not handle.value:
            return None
        _BLOCKING.append(torch.cuda.ExternalStream(handle.value))
    return _BLOCKING[:n]


def legacy_default_stream_demo(kernel_ms: float = 2.0) -> dict:
    """Spin on stream A, a tiny op on the legacy default stream, spin on stream B.

    With non-blocking streams (PyTorch's) A and B overlap. With blocking streams, the default-stream
    op waits for A and B waits for it: the legacy default stream serialises everything around it.
    """
    _need_cuda()
    cycles = int(kernel_ms * cycles_per_ms())
    default = torch.cuda.default_stream()
    small = torch.zeros(16, device="cuda")
    variants = {"non-blocking streams (PyTorch's)": [torch.cuda.Stream(), torch.cuda.Stream()]}
    try:
        blocking = blocking_streams(2)
    except Exception:  # noqa: BLE001 - the demo is optional where the runtime is not reachable
        blocking = None
    if blocking:
        variants["blocking streams (cudaStreamCreate)"] = blocking
    out: dict = {"blocking_available": bool(blocking)}
    # Warm up every kernel on every stream first: with CUDA's lazy module loading, a kernel's first
    # launch loads its module and waits for the whole device, which would serialise the first run.
    for a, b in variants.values():
        for s in (a, b, default):
            with torch.cuda.stream(s):
                spin(1000)
                small.add_(1.0)
    torch.cuda.synchronize()
    for name, (a, b) in variants.items():
        torch.cuda.synchronize()
        rec = EventRecorder()
        t0 = rec.mark_gpu(default)
        with torch.cuda.stream(a), rec.gpu("stream A", "spin A", a):
            spin(cycles)
        with torch.cuda.stream(default), rec.gpu("default", "tiny op on the default stream", default):
            small.add_(1.0)
        with torch.cuda.stream(b), rec.gpu("stream B", "spin B", b):
            spin(cycles)
        default.wait_stream(a)
        default.wait_stream(b)
        t1 = rec.mark_gpu(default)
        tl = rec.finish()
        out[name] = {"ms": t0.elapsed_time(t1), "timeline": tl.shifted()}
    return out


def missing_wait_demo(n: int = 1 << 20, delay_ms: float = 5.0) -> dict:
    """Producer writes x on stream A; consumer computes 2*x on stream B, with and without a wait."""
    _need_cuda()
    delay = int(delay_ms * cycles_per_ms())
    producer, consumer = torch.cuda.Stream(), torch.cuda.Stream()
    # Warm up the kernels first: with CUDA's lazy module loading, the first launch of a kernel
    # loads its module, which waits for the whole device and would hide the race (seen on an H200).
    warm = torch.zeros(n, device="cuda")
    for stream in (producer, consumer):
        with torch.cuda.stream(stream):
            warm.fill_(1.0)
            _ = warm * 2.0
    torch.cuda.synchronize()
    out: dict = {}
    for variant in ("racy (no wait)", "fixed (wait_event)", "fixed (wait_stream)"):
        x = torch.zeros(n, device="cuda")
        torch.cuda.synchronize()
        rec = EventRecorder()
        with torch.cuda.stream(producer), rec.gpu("producer", "spin, then x = 1", producer):
            spin(delay)  # stands in for a long kernel producing x
            x.fill_(1.0)
        ready = torch.cuda.Event()
        ready.record(producer)
        with torch.cuda.stream(consumer):
            if variant == "fixed (wait_event)":
                consumer.wait_event(ready)
            elif variant == "fixed (wait_stream)":
                consumer.wait_stream(producer)
            with rec.gpu("consumer", "y = 2 * x", consumer):
                y = x * 2.0
        torch.cuda.current_stream().wait_stream(consumer)
        tl = rec.finish()
        value = float(y.mean())
        out[variant] = {"y_mean": value, "expected": 2.0, "correct": value == 2.0,
                        "timeline": tl.shifted()}
    return out


def missing_record_stream_demo(n: int = 1 << 22, delay_ms: float = 5.0) -> dict:
    """A tensor freed while a side stream still reads it, without and with `record_stream`."""
    _need_cuda()
    delay = int(delay_ms * cycles_per_ms())
    side = torch.cuda.Stream()
    main = torch.cuda.current_stream()
    for s in (main, side):   # warm the kernels (lazy module loading would synchronise the device)
        with torch.cuda.stream(s):
            spin(1000)
            _ = torch.full((n,), 1.0, device="cuda") * 2.0
    torch.cuda.synchronize()
    out: dict = {}
    for variant in ("racy (no record_stream)", "fixed (record_stream)"):
        torch.cuda.synchronize()
        # no other cached free block of x's size: the next allocation can only reuse x's memory
        torch.cuda.empty_cache()
        rec = EventRecorder()
        x = torch.full((n,), 1.0, device="cuda")  # allocated on the main stream
        side.wait_stream(main)
        with torch.cuda.stream(side), rec.gpu("side", "spin, then y = 2 * x", side):
            spin(delay)
            y = x * 2.0  # queued: runs only after the spin
        if variant == "fixed (record_stream)":
            x.record_stream(side)  # the allocator keeps x's memory until side's work is done
        ptr = x.data_ptr()
        del x  # the host is done with x, but the side stream is not
        with rec.gpu("default", "z = 7 (new tensor)", main):
            z = torch.full((n,), 7.0, device="cuda")  # may reuse x's memory at once
        reused = z.data_ptr() == ptr
        main.wait_stream(side)
        tl = rec.finish()
        value = float(y.mean())
        out[variant] = {"y_mean": value, "expected": 2.0, "correct": value == 2.0,
                        "memory_reused": reused, "timeline": tl.shifted()}
        del y, z
    return out


def copy_overlap_demo(mbytes: int = 256, matmul_size: int = 4096, repeat: int = 3) -> dict:
    """Host-to-device copies overlapping a matmul chain sized to take about as long as the copy."""
    _need_cuda()
    n = mbytes * (1 << 20) // 4
    pageable = torch.randn(n)
    pinned = pageable.pin_memory()
    dst = torch.empty(n, device="cuda")
    g = torch.Generator(device="cuda").manual_seed(0)
    a = torch.randn(matmul_size, matmul_size, device="cuda", dtype=compute_dtype(), generator=g)
    b = torch.randn(matmul_size, matmul_size, device="cuda", dtype=compute_dtype(), generator=g)
    copy_stream = torch.cuda.Stream()
    main = torch.cuda.current_stream()

    # Calibrate: copy time and one matmul, so that compute takes about as long as the copy.
    def _ms(fn) -> float:
        fn()
        torch.cuda.synchronize()
        e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        e0.record()
        fn()
        e1.record()
        torch.cuda.synchronize()
        return e0.elapsed_time(e1)
    copy_ms = _ms(lambda: dst.copy_(pinned, non_blocking=True))
    mm_ms = _ms(lambda: torch.mm(a, b))
    reps = max(1, round(copy_ms / max(mm_ms, 1e-3)))

    def compute() -> None:
        for _ in range(reps):
            torch.mm(a, b)

    variants = {
        "serial: pinned copy, then compute": ("serial", pinned),
        "copy stream: pageable, non_blocking": ("overlap", pageable),
        "copy stream: pinned, non_blocking": ("overlap", pinned),
    }
    out: dict = {"copy_ms": copy_ms, "compute_ms_estimate": reps * mm_ms, "matmul_reps": reps,
                 "mbytes": mbytes, "variants": {}}
    for name, (how, src) in variants.items():
        best = None
        for _ in range(repeat):
            torch.cuda.synchronize()
            rec = EventRecorder()
            t0 = rec.mark_gpu(main)
            h0 = time.perf_counter()
            if how == "serial":
                with rec.gpu("default", "H2D copy", main):
                    dst.copy_(src, non_blocking=True)
                host_copy_s = time.perf_counter() - h0
                with rec.gpu("default", "matmuls", main):
                    compute()
            else:
                copy_stream.wait_stream(main)
                with torch.cuda.stream(copy_stream), rec.gpu("copy", "H2D copy", copy_stream):
                    dst.copy_(src, non_blocking=True)
                host_copy_s = time.perf_counter() - h0  # how long the host was held by the copy
                with rec.gpu("default", "matmuls", main):
                    compute()
                main.wait_stream(copy_stream)
            t1 = rec.mark_gpu(main)
            tl = rec.finish()
            total = t0.elapsed_time(t1)
            if best is None or total < best["total_ms"]:
                best = {"total_ms": total, "host_blocked_ms": host_copy_s * 1e3,
                        "timeline": tl.shifted()}
        ok = torch.equal(dst.cpu(), pageable)
        best["correct"] = bool(ok)
        out["variants"][name] = best
    serial = out["variants"]["serial: pinned copy, then compute"]["total_ms"]
    for v in out["variants"].values():
        v["speedup_vs_serial"] = serial / v["total_ms"]
    return out
