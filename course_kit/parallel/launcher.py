"""Run one function on N processes, from a notebook, a test or the CLI.

`launch(fn, 2)` starts two processes (spawn, so it works inside Jupyter), joins them into one
process group (gloo on CPU, NCCL on GPUs with one GPU per rank), calls `fn(rank, world_size,
*args)` on every rank and returns the list of return values, rank 0 first.

Starting processes is the expensive part (each one needs torch imported), so the processes are
forked from a server that imported torch once (forkserver; spawn where there is none) and live in a
`Pool` that runs many functions one after another; `launch` keeps one pool per (size, backend)
alive for the session. A function defined in a notebook cannot be imported by the workers, so
its source is sent instead and executed there (it must then be self-contained: `torch`, `dist`,
`nn`, `F` and `math` are predefined).
"""
from __future__ import annotations

import atexit
import inspect
import os
import pickle
import queue
import socket
import textwrap
import time
import traceback
from dataclasses import dataclass
from typing import Any, Callable

import multiprocessing as mp
from ..device import has_cuda

BACKENDS = ("auto", "gloo", "nccl")


class RankError(RuntimeError):
    """One or more ranks raised; `errors` maps rank -> traceback text."""

    def __init__(self, errors: dict[int, str]):
        self.errors = dict(sorted(errors.items()))
        text = "\n".join(f"--- rank {r} ---\n{tb}" for r, tb in self.errors.items())
        super().__init__(f"{len(self.errors)} rank(s) failed:\n{text}")


def free_port() -> int:
    """A TCP port on localhost that is free now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def resolve_backend(backend: str, world_size: int) -> str:
    """'auto' means NCCL when CUDA is present, else gloo; NCCL needs one GPU per rank."""
    if backend not in BACKENDS:
        raise ValueError(f"backend={backend!r}; choose one of {BACKENDS}")
    if world_size < 1:
        raise ValueError(f"world_size={world_size}; it must be >= 1")
    import torch
    if backend == "auto":
        backend = "nccl" if has_cuda() else "gloo"
    if backend == "nccl":
        n_gpu = torch.cuda.device_count() if has_cuda() else 0
        if n_gpu == 0:
            raise ValueError(f"backend='nccl' needs CUDA GPUs (one per rank) and none is visible; "
                             f"world_size={world_size} needs {world_size} GPUs; use backend='gloo'")
        if world_size > n_gpu:
            raise ValueError(
                f"world_size={world_size} needs {world_size} GPUs (one per rank) but {n_gpu} "
                f"visible; use world_size in 1..{n_gpu} or backend='gloo'")
    return backend


@dataclass
class Source:
    """A function shipped as source text (for functions defined in a notebook)."""
    name: str
    source: str

    def load(self) -> Callable[..., Any]:
        import math
        import torch
        import torch.distributed as dist
        import torch.nn.functional as F
        from torch import nn
        ns: dict[str, Any] = {"torch": torch, "dist": dist, "nn": nn, "F": F, "math": math}
        exec(compile(self.source, f"<notebook:{self.name}>", "exec"), ns)
        return ns[self.name]


def portable(fn: Callable[..., Any]) -> Any:
    """`fn` itself if the workers can import it, else its source text."""
    module = getattr(fn, "__module__", None)
    qualname = getattr(fn, "__qualname__", "")
    if module not in (None, "__main__", "__mp_main__") and "<locals>" not in qualname:
        return fn
    try:
        src = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError) as e:
        raise ValueError(f"cannot send {fn!r} to the workers: define it at module level in a "
                         f"module, or in a notebook cell ({e})") from e
    return Source(fn.__name__, src)


def _context() -> Any:
    """forkserver with torch preloaded where there is one (a worker then starts in well under a
    second instead of importing torch again); spawn elsewhere. Both work inside Jupyter."""
    if "forkserver" in mp.get_all_start_methods():
        ctx = mp.get_context("forkserver")
        ctx.set_forkserver_preload(["torch", "torch.distributed", __name__])
        return ctx
    return mp.get_context("spawn")


def resolve(fn: Any) -> Callable[..., Any]:
    """A callable from what `portable` returned (inside a worker)."""
    return fn.load() if isinstance(fn, Source) else fn


def _worker(rank: int, world_size: int, backend: str, init_method: str, threads: int,
            tasks: Any, results: Any, env: dict[str, str]) -> None:
    """The loop of one rank: join the group, then run tasks until told to stop."""
    # a forkserver child has the server's environment, not the caller's current one
    os.environ.update(env)
    import torch
    import torch.distributed as dist
    from datetime import timedelta
    if threads > 0:
        torch.set_num_threads(threads)
    try:
        if backend == "nccl":
            torch.cuda.set_device(rank)
        kwargs: dict[str, Any] = {}
        if backend == "nccl":
            kwargs["device_id"] = torch.device("cuda", rank)
        try:
            dist.init_process_group(backend, init_method=init_method, rank=rank,
                                    world_size=world_size, timeout=timedelta(seconds=120), **kwargs)
        except TypeError:  # torch without device_id
            kwargs.pop("device_id", None)
            dist.init_process_group(backend, init_method=init_method, rank=rank,
                                    world_size=world_size, timeout=timedelta(seconds=120))
        results.put((rank, "ready", None))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))
        return
    parent = os.getppid()
    while True:
        try:
            blob = tasks.get(timeout=5.0)
        except queue.Empty:
            if os.getppid() != parent:  # whoever started us is gone: do not linger
                break
            continue
        except KeyboardInterrupt:       # the kernel's interrupt or shutdown reaches the whole
            break                       # process group: leave quietly, no traceback while idle
        if blob is None:
            break
        try:
            fn, args, kwargs = pickle.loads(blob)
            if isinstance(fn, Source):
                fn = fn.load()
            out = _to_cpu(fn(rank, world_size, *args, **kwargs))
            results.put((rank, "ok", pickle.dumps(out)))
        except BaseException:
            results.put((rank, "error", traceback.format_exc()))
    try:
        dist.destroy_process_group()
    except Exception:
        pass


def _to_cpu(obj: Any) -> Any:
    """Move tensors in nested results to the CPU so they pickle without the GPU."""
    import torch
    if isinstance(obj, torch.Tensor):
        return obj.detach().cpu()
    if isinstance(obj, dict):
        return {k: _to_cpu(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_to_cpu(v) for v in obj]
    if isinstance(obj, tuple) and not hasattr(obj, "_fields"):
        return tuple(_to_cpu(v) for v in obj)
    return obj


class Pool:
    """N worker processes in one process group, running functions one after another.

    >>> with Pool(2) as pool:
    ...     outs = pool.run(course_kit.parallel.data.dp_check)
    """

    def __init__(self, world_size: int, backend: str = "auto", *, threads: int = 1,
                 start_timeout_s: float = 180.0):
        self.backend = resolve_backend(backend, world_size)
        self.world_size = world_size
        if self.backend == "nccl":
            # NVLink SHARP multicast stays off: it is not available on every machine we use.
            os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
        else:
            os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
        ctx = _context()
        self._results = ctx.Queue()
        self._tasks = [ctx.Queue() for _ in range(world_size)]
        init_method = f"tcp://127.0.0.1:{free_port()}"
        self._procs = [
            # not daemonic: a rank may start processes itself (torch.compile's compile workers)
            ctx.Process(target=_worker, daemon=False,
                        args=(r, world_size, self.backend, init_method, threads,
                              self._tasks[r], self._results, dict(os.environ)))
            for r in range(world_size)]
        for p in self._procs:
            p.start()
        self.broken = False
        self._collect("ready", start_timeout_s)

    def _collect(self, expect: str, timeout_s: float | None) -> list[Any]:
        out: dict[int, Any] = {}
        errors: dict[int, str] = {}
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        grace_end = None
        while len(out) + len(errors) < self.world_size:
            now = time.monotonic()
            if grace_end is not None and now > grace_end:
                break  # the others are probably stuck in a collective with the failed rank
            if deadline is not None and now > deadline:
                for r in range(self.world_size):
                    if r not in out and r not in errors:
                        errors[r] = f"no answer within {timeout_s:.0f} s"
                break
            try:
                rank, kind, payload = self._results.get(timeout=0.2)
            except queue.Empty:
                for r, p in enumerate(self._procs):
                    if not p.is_alive() and r not in out and r not in errors:
                        errors[r] = f"process died with exit code {p.exitcode}"
                        grace_end = grace_end or time.monotonic() + 5.0
                continue
            if kind == "error":
                errors[rank] = payload
                grace_end = grace_end or time.monotonic() + 5.0
            else:
                out[rank] = payload
        if errors:
            for r in range(self.world_size):
                if r not in out and r not in errors:
                    errors[r] = "stopped after another rank failed (it was waiting on it)"
            self.close(force=True)
            raise RankError(errors)
        if expect == "ready":
            return []
        return [pickle.loads(out[r]) for r in range(self.world_size)]

    def run(self, fn: Callable[..., Any], *args: Any, timeout_s: float | None = 600.0,
            **kwargs: Any) -> list[Any]:
        """Call `fn(rank, world_size, *args, **kwargs)` on every rank; return the results."""
        if self.broken:
            raise RuntimeError("this pool was closed (a rank failed or close() was called); "
                               "start a new one")
        blob = pickle.dumps((portable(fn), args, kwargs))
        for q in self._tasks:
            q.put(blob)
        return self._collect("ok", timeout_s)

    def close(self, force: bool = False) -> None:
        if self.broken and not force:
            return
        self.broken = True
        if not force:
            for q in self._tasks:
                q.put(None)
            for p in self._procs:
                p.join(timeout=10)
        for p in self._procs:
            if p.is_alive():
                p.terminate()
                p.join(timeout=5)
        if _POOLS.get((self.world_size, self.backend)) is self:
            del _POOLS[(self.world_size, self.backend)]

    def __enter__(self) -> "Pool":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_POOLS: dict[tuple[int, str], Pool] = {}


def get_pool(world_size: int, backend: str = "auto") -> Pool:
    """The shared pool for this size and backend (started on first use, kept for the session)."""
    backend = resolve_backend(backend, world_size)
    pool = _POOLS.get((world_size, backend))
    if pool is None or pool.broken:
        pool = Pool(world_size, backend)
        _POOLS[(world_size, backend)] = pool
    return pool


def launch(fn: Callable[..., Any], world_size: int, *args: Any, backend: str = "auto",
           reuse: bool = True, timeout_s: float | None = 600.0, **kwargs: Any) -> list[Any]:
    """Run `fn(rank, world_size, *args, **kwargs)` on `world_size` processes; results by rank.

    Raises RankError (with every failed rank's traceback) if any rank raises, and ValueError if
    `world_size` exceeds the GPUs at hand for NCCL.
    """
    if reuse:
        return get_pool(world_size, backend).run(fn, *args, timeout_s=timeout_s, **kwargs)
    with Pool(world_size, backend) as pool:
        return pool.run(fn, *args, timeout_s=timeout_s, **kwargs)


def shutdown() -> None:
    """Stop every shared pool (also done at exit)."""
    for pool in list(_POOLS.values()):
        pool.close()
    _POOLS.clear()


atexit.register(shutdown)
