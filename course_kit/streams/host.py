"""The sync and async decode loops on a CPU, with a worker thread standing in for the GPU.

A GPU is a queue: the host enqueues kernels and carries on until it needs a result. `HostDevice`
is that queue on a CPU: one worker thread executing submitted work in order, like one CUDA stream.
The work it runs is real torch matmuls, which release the GIL, so the host thread can prepare the
next step (Python-heavy work, which holds the GIL) while the "device" computes.

`decode_loop(mode="sync")`: prepare step N, run it, wait for its tokens, postprocess, repeat. The
device idles while the host prepares and postprocesses.

`decode_loop(mode="async")`: prepare step N+1 while the device runs step N. The host does not know
step N's tokens yet, so step N+1's inputs carry a placeholder (-1); the device fills it from the
tokens it produced itself (the "carry-over"). The host postprocesses step N after enqueueing N+1.

Both modes produce identical tokens; what changes is the timeline.
"""
from __future__ import annotations

import sys
import time

from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Iterator

import torch

from .recorder import EventRecorder
from .timeline import Timeline

PLACEHOLDER = -1


class HostDevice:
    """One worker thread executing submitted callables in order, each recorded as a span."""

    def __init__(self, recorder: EventRecorder, lane: str = "device") -> None:
        self.recorder, self.lane = recorder, lane
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="host-device")

    def submit(self, name: str, fn: Callable[..., Any], *args: Any) -> Future:
        def run() -> Any:
            with self.recorder.cpu(self.lane, name):
                return fn(*args)
        return self._pool.submit(run)

    def synchronize(self) -> None:
        self._pool.submit(lambda: None).result()

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def __enter__(self) -> "HostDevice":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


@dataclass
class ToyDecoder:
    """A stand-in model: embedding, `layers` square matmuls with tanh, tied output projection."""

    embed: torch.Tensor
    weights: list[torch.Tensor]
    carry: torch.Tensor | None = field(default=None, repr=False)  # last tokens, "on the device"

    @classmethod
    def create(cls, vocab: int = 512, hidden: int = 256, layers: int = 4,
               seed: int = 0) -> "ToyDecoder":
        for name, v in (("vocab", vocab), ("hidden", hidden), ("layers", layers)):
            if v < 1:
                raise ValueError(f"{name}={v}; it must be >= 1")
        g = torch.Generator().manual_seed(seed)
        embed = torch.randn(vocab, hidden, generator=g)
        weights = [torch.randn(hidden, hidden, generator=g) / hidden ** 0.5 for _ in range(layers)]
        return cls(embed, weights)

    def step(self, tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """One decode step on the "device": fill placeholders from the carry, return next tokens."""
        if self.carry is not None:
            tokens = torch.where(tokens == PLACEHOLDER, self.carry, tokens)
        if bool((tokens < 0).any()):
            raise RuntimeError("a placeholder token reached the model with nothing to fill it")
        h = self.embed[tokens] + 0.01 * positions[:, None].float()
        for w in self.weights:
            h = torch.tanh(h @ w)
        nxt = torch.argmax(h @ self.embed.T, dim=-1)
        self.carry = nxt
        return nxt


def prepare_inputs(last: list[int] | None, lengths: list[int], work: int) -> dict[str, torch.Tensor]:
    """Host-side batch preparation: Python bookkeeping per request, then tensors.

    `work` scales the per-request Python work (building a slot list of that many entries, as a
    scheduler does for block tables); `last=None` means the previous tokens are not known yet.
    """
    slots = []
    for i, n in enumerate(lengths):
        table = [(i * 7919 + n + j * 31) % 4099 for j in range(work)]  # block-table-like work
        slots.append(table[n % work] if work else 0)
    tokens = [PLACEHOLDER] * len(lengths) if last is None else list(last)
    return {"tokens": torch.tensor(tokens, dtype=torch.int64),
            "positions": torch.tensor(lengths, dtype=torch.int64),
            "slots": torch.tensor(slots, dtype=torch.int64)}


@contextmanager
def _threads_setup(n: int) -> Iterator[None]:
    """One intra-op thread (the device thread is the parallelism), and quick GIL hand-offs.

    Each torch op of the device thread needs the GIL for its Python dispatch; by default a thread
    waiting for the GIL waits up to 5 ms for the running one to drop it, which would stretch every
    "kernel" while the host prepares the next step. A real GPU needs no GIL, so we shorten that.
    """
    old_threads, old_switch = torch.get_num_threads(), sys.getswitchinterval()
    torch.set_num_threads(n)
    sys.setswitchinterval(5e-5)
    try:
        yield
    finally:
        torch.set_num_threads(old_threads)
        sys.setswitchinterval(old_switch)


def decode_loop(mode: str = "sync", batch: int = 8, steps: int = 32, hidden: int = 256,
                layers: int = 4, vocab: int = 512, prep_work: int = 2000, seed: int = 0,
                torch_threads: int = 1, device_ms: float = 0.0) -> dict:
    """Run the toy decode loop in `mode` ("sync" or "async"); return tokens, timeline, figures.

    `device_ms` > 0 makes each device step last at least that long, sleeping the remainder: an
    accelerator whose kernels, like a GPU's, take time without occupying a host core. With 0, the
    device step is only the real matmuls, which need a free core to overlap the host.
    """
    if mode not in ("sync", "async"):
        raise ValueError(f"mode {mode!r} not in ('sync', 'async')")
    if batch < 1 or steps < 1:
        raise ValueError(f"batch={batch}, steps={steps}; both must be >= 1")
    if device_ms < 0:
        raise ValueError(f"device_ms={device_ms}; it must be >= 0")
    model = ToyDecoder.create(vocab, hidden, layers, seed)

    def device_step(tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        t0 = time.perf_counter()
        out = model.step(tokens, positions)
        rest = device_ms / 1e3 - (time.perf_counter() - t0)
        if rest > 0:
            time.sleep(rest)
        return out
    g = torch.Generator().manual_seed(seed + 1)
    prompt_last = torch.randint(0, vocab, (batch,), generator=g).tolist()
    lengths = torch.randint(4, 64, (batch,), generator=g).tolist()
    outputs: list[list[int]] = [[] for _ in range(batch)]

    def postprocess(tokens: torch.Tensor) -> list[int]:
        toks = tokens.tolist()
        for i, t in enumerate(toks):
            outputs[i].append(t)
            lengths[i] += 1
        return toks

    with _threads_setup(torch_threads):
        model.step(torch.tensor(prompt_last), torch.tensor(lengths))  # warm-up
        prepare_inputs(prompt_last, lengths, prep_work)
        model.carry = None
        rec = EventRecorder(enabled_gpu=False)
        with HostDevice(rec) as dev:
            # warm the worker thread too (its first torch op pays thread-local set-up), unrecorded
            dev._pool.submit(model.step, torch.tensor(prompt_last), torch.tensor(lengths)).result()
            model.carry = None
            if mode == "sync":
                last = prompt_last
                for step in range(steps):
                    with rec.cpu("cpu", f"prepare {step}"):
                        inp = prepare_inputs(last, lengths, prep_work)
                    fut = dev.submit(f"step {step}", device_step, inp["tokens"], inp["positions"])
                    tokens = fut.result()  # the host waits: the sync point of every step
                    with rec.cpu("cpu", f"postprocess {step}"):
                        last = postprocess(tokens)
            else:
                pending: Future | None = None
                for step in range(steps):
                    # Lengths advance by one per step whether or not the host has the tokens yet.
                    ahead = [n + (1 if pending is not None else 0) for n in lengths]
                    with rec.cpu("cpu", f"prepare {step}"):
                        inp = prepare_inputs(prompt_last if step == 0 else None, ahead, prep_work)
                    fut = dev.submit(f"step {step}", device_step, inp["tokens"], inp["positions"])
                    if pending is not None:
                        tokens = pending.result()
                        with rec.cpu("cpu", f"postprocess {step - 1}"):
                            postprocess(tokens)
                    pending = fut
                tokens = pending.result()
                with rec.cpu("cpu", f"postprocess {steps - 1}"):
                    postprocess(tokens)
            dev.synchronize()
    tl = rec.timeline.shifted()
    return summarize(tl, outputs, mode=mode, batch=batch, steps=steps, hidden=hidden,
                     layers=layers, prep_work=prep_work, device_ms=device_ms)


def summarize(tl: Timeline, outputs: list[list[int]], **params: Any) -> dict:
    """Figures of one run: wall time, throughput, device idle fraction, busy times, bound."""
    lo, hi = tl.window()
    wall = hi - lo
    n_tokens = sum(len(o) for o in outputs)
    return {**params, "outputs": outputs, "timeline": tl, "wall_s": wall,
            "tokens_per_s": n_tokens / wall if wall > 0 else float("inf"),
            "device_busy_s": tl.busy_s("device"), "cpu_busy_s": tl.busy_s("cpu"),
            "device_idle": tl.idle_fraction("device"),
            "speedup_bound": tl.overlap_speedup_bound(["cpu", "device"])}


def compare(batch: int = 8, steps: int = 32, hidden: int = 256, layers: int = 4,
            vocab: int = 512, prep_work: int = 2000, seed: int = 0,
            device_ms: float = 0.0, repeat: int = 1) -> dict:
    """Sync and async on the same workload, best of `repeat` runs each; checks the tokens agree.

    Modes alternate (sync, async, sync, ...) so that a burst of load on a shared machine does not
    land on one mode only; the fastest run of each is kept.
    """
    if repeat < 1:
        raise ValueError(f"repeat={repeat}; it must be >= 1")
    kw = dict(batch=batch, steps=steps, hidden=hidden, layers=layers, vocab=vocab,
              prep_work=prep_work, seed=seed, device_ms=device_ms)
    best: dict[str, dict] = {}
    for _ in range(repeat):
        for mode in ("sync", "async"):
            r = decode_loop(mode, **kw)
            if mode not in best or r["wall_s"] < best[mode]["wall_s"]:
                best[mode] = r
    sync, asyn = best["sync"], best["async"]
    if sync["outputs"] != asyn["outputs"]:
        raise AssertionError("async tokens differ from sync tokens: the carry-over is broken")
    return {"sync": sync, "async": asyn, "speedup": sync["wall_s"] / asyn["wall_s"],
            "idle_removed": sync["device_idle"] - asyn["device_idle"]}

