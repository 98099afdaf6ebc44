"""The engine's async mode (notebook 07): the CPU prepares step N+1 while the GPU runs step N.

The sync loop does, per step: schedule -> prepare inputs -> run the model -> wait for the sampled
tokens -> postprocess. The GPU idles during every host stage. The async loop reorders the host
work so that the GPU always has the next step queued:

    call k:  schedule k  ->  prepare k (pinned buffers, copy stream)  ->  launch k
             ->  wait for step k-1's tokens, postprocess k-1  ->  advance the state past step k

The trick is that step k is scheduled and prepared before the host knows step k-1's tokens. The
host advances each sequence by a *placeholder* token (-1) right after launching the step that
will produce it ("advance"); the next step's inputs carry that placeholder, and on the device,
before the model runs, it is replaced by the token step k-1 sampled there (`index_copy` from the
device tensor of sampled tokens: the tokens never make a round trip through the host first).
Lengths are known in advance, so a request reaching `max_new_tokens` is retired at once; an EOS is
only seen one step late, and the extra token computed for that request is dropped.

Backends: on CUDA, inputs are copied on a copy stream from pinned memory and the compute stream
waits on an event; on a CPU, a worker thread stands in for the GPU (`streams.HostDevice`), so the
same overlap is real there too. Both record a timeline: host work on lane "cpu", device steps on
lane "gpu" (and copies on "copy"), from which idle gaps and per-step times are read.

`AsyncEngine(model, mode="sync")` runs the same code without the overlap, for comparisons.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.profiler import record_function

from ..engine.engine import Engine, EngineConfig
from ..engine.metrics import RequestOutput, StepRecord
from ..engine.model_runner import StepInputs
from ..engine.scheduler import SchedulerOutput
from ..engine.sequence import Sequence, Status
from ..models import sampling
from .host import HostDevice
from .recorder import EventRecorder
from .timeline import Timeline

PLACEHOLDER = -1
MODES = ("sync", "async")


@dataclass
class _Fill:
    """Where placeholder tokens sit in a step's token tensor, and which sampled row fills each."""
    dst: torch.Tensor     # rows of batch.tokens holding a placeholder
    src: torch.Tensor     # rows of the previous step's sampled tokens


@dataclass
class _Step:
    index: int
    sched: SchedulerOutput
    inputs: StepInputs
    start: float
    rows: list[tuple[int, str, str]]
    slots: list[tuple[Sequence, int] | None] = field(default_factory=list)  # per inputs.order
    tokens_dev: torch.Tensor | None = None    # CUDA: sampled tokens, on the device
    tokens_host: torch.Tensor | None = None   # CUDA: pinned buffer they are copied into
    done: Any = None                          # CUDA event, or the worker thread's Future


class AsyncEngine(Engine):
    """`Engine` with the step loop overlapped (mode="async") or not (mode="sync")."""

    def __init__(self, model, config: EngineConfig | None = None, mode: str = "async",
                 device_threads: int = 1, **overrides: Any) -> None:
        if mode not in MODES:
            raise ValueError(f"mode={mode!r}; choose one of {MODES}")
        if device_threads < 1:
            raise ValueError(f"device_threads={device_threads}; it must be >= 1")
        self.device_threads = device_threads
        super().__init__(model, config, **overrides)
        self.mode = mode
        self.backend = "cuda" if self.runner.device.type == "cuda" else "thread"
        self.copy_stream = torch.cuda.Stream() if self.backend == "cuda" else None
        self._device: HostDevice | None = None
        self._inflight: _Step | None = None
        self._k = 0
        self.recorder = EventRecorder(enabled_gpu=self.backend == "cuda")
        self.timeline = Timeline()
        self._last_tokens = 0

    # ---- the loop -----------------------------------------------------------------------
    def warmup(self) -> None:
        super().warmup()
        self._inflight, self._k = None, 0
        self.recorder = EventRecorder(enabled_gpu=self.backend == "cuda")
        if self.backend == "thread":
            if self._device is not None:
                self._device.close()
            self._device = HostDevice(self.recorder, lane="gpu")

    def has_unfinished(self) -> bool:
        return super().has_unfinished() or self._inflight is not None

    def step(self, more_coming: bool = False) -> list[tuple[Sequence, int]]:
        """Schedule and launch one step; return the tokens that became known in this call."""
        rec, k = self.recorder, self._k
        start = self.now()
        with rec.cpu("cpu", f"schedule {k}"):
            sched = self.schedule(more_coming)
        launched = None
        if not sched.empty:
            self._k += 1
            # "step k" is how a profiler trace attributes each kernel and copy to its step
            # (profiling.trace: through the launch call's correlation id)
            with record_function(f"step {k}"):
                with rec.cpu("cpu", f"prepare {k}"):
                    inputs, fill, rows_dev, ready = self._prepare(sched)
                with rec.cpu("cpu", f"launch {k}"):
                    launched = self._launch(k, sched, inputs, fill, rows_dev, ready, start)
        produced: list[tuple[Sequence, int]] = []
        if self.mode == "sync":
            if launched is not None:
                with rec.cpu("cpu", f"advance {k}"):
                    self._advance(launched)
                produced = self._resolve(launched)
        else:
            prev, self._inflight = self._inflight, launched
            if prev is not None:
                produced = self._resolve(prev)
            if launched is not None:
                with rec.cpu("cpu", f"advance {k}"):
                    self._advance(launched)
        self.last_step_ran = launched is not None or bool(produced) or bool(sched.preempted)
        return produced

    def generate(self, prompts: list[list[int]], sampling=None, arrivals=None,
                 progress: bool = False) -> list[RequestOutput]:
        self._last_tokens = 0
        # CPU backend: the worker thread is the "GPU" and the host thread needs its own core, so
        # torch runs its ops on one thread (two OpenMP threads would fight the host for cores)
        threads = torch.get_num_threads()
        if self.backend == "thread":
            torch.set_num_threads(self.device_threads)
        try:
            outs = super().generate(prompts, sampling, arrivals, progress)
            self._last_tokens = sum(len(o.tokens) for o in outs)
        finally:
            torch.set_num_threads(threads)
            self.timeline = self.recorder.finish()
            if self._device is not None:
                self._device.close()
                self._device = None
        return outs

    # ---- stages -------------------------------------------------------------------------
    def _prepare(self, sched: SchedulerOutput):
        """Inputs of a step (pinned, copied on the copy stream on CUDA) and its placeholder fill."""
        if self.backend != "cuda":
            inputs = self.prepare(sched)
            fill = self._fill_rows(inputs, None)
            return inputs, fill, torch.tensor(inputs.rows), None
        stream = self.copy_stream
        with torch.cuda.stream(stream):
            e0 = self.recorder.mark_gpu(stream)
            inputs = self.prepare(sched)   # runner.prepare copies pinned -> device, non_blocking
            fill = self._fill_rows(inputs, self.runner.device)
            rows_dev = _to_device(inputs.rows, self.runner.device)
            ready = self.recorder.mark_gpu(stream)
        self.recorder.add_gpu("copy", f"copy {self._k - 1}", e0, ready)
        return inputs, fill, rows_dev, ready

    def _fill_rows(self, inputs: StepInputs, dev) -> _Fill | None:
        """Find the placeholder tokens of this step and the sampled row of the step in flight."""
        prev = self._inflight
        if prev is None:
            return None
        src_of = {id(s[0]): (i, s[1]) for i, s in enumerate(prev.slots) if s is not None}
        # where each row's tokens start in the flat token tensor: the runner's own record of the
        # layout when it keeps one, else the rows are consecutive in `order`
        host = getattr(inputs, "host", None)
        starts = list(host["qstart"]) if host and "qstart" in host else None
        dst, src = [], []
        offset = 0
        for i, item in enumerate(inputs.order):
            if starts is not None:
                offset = starts[i]
            seq, n = item.seq, item.num_tokens
            start, n_prompt = seq.num_computed, len(seq.prompt)
            for p in range(max(start, n_prompt), start + n):   # placeholders are outputs
                if seq.output[p - n_prompt] == PLACEHOLDER:
                    row, out_idx = src_of.get(id(seq), (None, None))
                    if row is None or out_idx != p - n_prompt:
                        raise RuntimeError(f"request {seq.request_id!r}: placeholder at position "
                                           f"{p} has no sampled token in the step in flight")
                    dst.append(offset + p - start)
                    src.append(row)
            offset += n
        if not dst:
            return None
        return _Fill(_to_device(dst, dev), _to_device(src, dev))

    def _launch(self, k: int, sched: SchedulerOutput, inputs: StepInputs, fill: _Fill | None,
                rows_dev: torch.Tensor, ready, start: float) -> _Step:
        rows = [(s.seq.slot, s.seq.request_id,
                 "prefill" if s.num_tokens > 1 or not s.sample else "decode") for s in inputs.order]
        st = _Step(k, sched, inputs, start, rows)
        prev = self._inflight
        if self.backend == "thread":
            if self._device is None:          # step() called without generate() (a serving loop)
                self._device = HostDevice(self.recorder, lane="gpu")

            def work() -> torch.Tensor:
                prev_tokens = prev.done.result() if fill is not None else None
                with record_function(f"step {k}"):   # the worker thread's own range of this step
                    return self._device_step(inputs, fill, prev_tokens, rows_dev)
            st.done = self._device.submit(f"step {k}", work)
            return st
        compute = torch.cuda.current_stream()
        compute.wait_event(ready)
        # tensors made on the copy stream are used on this one: tell the allocator (see the
        # missing record_stream race of streams.gpu)
        for t in _tensors(inputs.batch) + [rows_dev] + ([fill.dst, fill.src] if fill else []):
            t.record_stream(compute)
        with self.recorder.gpu("gpu", f"step {k}", compute):
            toks = self._device_step(inputs, fill, prev.tokens_dev if fill else None, rows_dev)
            st.tokens_host = torch.empty(toks.shape, dtype=toks.dtype, pin_memory=True)
            st.tokens_host.copy_(toks, non_blocking=True)
        st.tokens_dev = toks
        st.done = torch.cuda.Event()
        st.done.record(compute)
        return st

    @torch.inference_mode()
    def _device_step(self, inputs: StepInputs, fill: _Fill | None,
                     prev_tokens: torch.Tensor | None, rows: torch.Tensor) -> torch.Tensor:
        """On the device: fill placeholders from the previous step's tokens, run, sample."""
        if fill is not None:
            tokens = inputs.batch.tokens.index_copy(0, fill.dst, prev_tokens.index_select(0, fill.src))
            inputs = dataclasses.replace(inputs, batch=dataclasses.replace(inputs.batch, tokens=tokens))
        logits = self.runner.run(inputs)
        picked = logits.index_select(0, rows)
        toks = picked.argmax(dim=-1)
        for i, item in enumerate(inputs.order):   # as ModelRunner.sample, minus the host sync
            p = item.seq.params
            if p.greedy or not item.sample:
                continue
            if p.seed is not None and item.seq.generator is None:
                item.seq.generator = torch.Generator(device=logits.device).manual_seed(p.seed)
            toks[i] = sampling.sample(picked[i:i + 1], p.temperature, p.top_k, p.top_p,
                                      item.seq.generator)[0]
        return toks

    def _advance(self, st: _Step) -> None:
        """Move every scheduled sequence past this step, with a placeholder for its new token."""
        now = self.now()
        for item in st.inputs.order:
            seq = item.seq
            if seq.status is not Status.RUNNING:       # aborted, or finished by an earlier EOS
                st.slots.append(None)
                continue
            seq.num_computed += item.num_tokens
            self.blocks.commit(seq)
            if not item.sample:
                st.slots.append(None)
                continue
            seq.output.append(PLACEHOLDER)
            st.slots.append((seq, len(seq.output) - 1))
            if len(seq.output) >= seq.params.max_new_tokens:
                self.scheduler.abort(seq.request_id, now, "length")   # retire now: frees its slot

    def _resolve(self, st: _Step) -> list[tuple[Sequence, int]]:
        """Wait for a step's tokens, put them in place of the placeholders, retire EOS requests."""
        rec = self.recorder
        if self.backend == "thread":
            values = st.done.result().tolist()
        else:
            st.done.synchronize()
            values = st.tokens_host.tolist()
        with rec.cpu("cpu", f"postprocess {st.index}"):
            now = self.now()
            produced = []
            for slot, token in zip(st.slots, values):
                if slot is None:
                    continue
                seq, idx = slot
                if idx >= len(seq.output) or seq.output[idx] != PLACEHOLDER:
                    continue                             # dropped: EOS came earlier
                if seq.finish_reason == "abort":
                    del seq.output[idx:]
                    continue
                seq.output[idx] = int(token)
                seq.token_times.append(now)
                if seq.first_token_time is None:
                    seq.first_token_time = now
                produced.append((seq, int(token)))
                eos = (not seq.params.ignore_eos and seq.eos_token_id is not None
                       and int(token) == seq.eos_token_id)
                if eos:
                    del seq.output[idx + 1:]             # tokens already scheduled past EOS
                    if seq.status is Status.RUNNING:
                        self.scheduler.abort(seq.request_id, now, "eos")
                    seq.finish_reason = "eos"
                if seq.finished and len(seq.output) == idx + 1:
                    seq.finish_time = now
            real = sum(s.num_tokens for s in st.sched.scheduled)
            self.steps.append(StepRecord(st.start, now, st.rows, real, st.sched.padding_tokens,
                                         self.blocks.num_used_blocks, len(self.scheduler.waiting),
                                         len(st.sched.preempted), st.sched.kv_tokens))
            if self.config.check_invariants:
                self.blocks.check_invariants()
        return produced

    # ---- what the timeline says ---------------------------------------------------------
    def timing(self) -> dict:
        """Per-step CPU and GPU time and the gaps between step brackets, over the last `generate`."""
        return timing_summary(self.timeline, self._last_tokens)


def timing_summary(tl: Timeline, n_tokens: int) -> dict:
    """Figures of one engine run from its timeline (lanes "cpu" and "gpu").

    The "gpu" lane holds one span per step, from a CUDA event recorded before its launch to one
    after it: the gaps between kernels *inside* a step count as busy there. So the share of the
    window outside those spans is the host's picture of the loop (`host_step_gap_fraction`), never
    the GPU's idle fraction, which is read from a profiler trace (`profiling`, DESIGN.md)."""
    if "gpu" not in tl.lanes:
        return {"steps": 0, "wall_s": 0.0, "tokens": n_tokens}
    lo, hi = tl.window()
    gpu = tl.on("gpu")
    cpu_by_step: dict[int, float] = {}
    for s in tl.on("cpu"):
        kind, _, idx = s.name.partition(" ")
        cpu_by_step[int(idx)] = cpu_by_step.get(int(idx), 0.0) + s.duration_s
    gaps = tl.gaps("gpu", (lo, hi))
    gpu_busy = tl.busy_s("gpu")
    med = lambda xs: sorted(xs)[len(xs) // 2] if xs else 0.0  # noqa: E731
    return {
        "steps": len(gpu), "wall_s": hi - lo, "tokens": n_tokens,
        "tokens_per_s": n_tokens / (hi - lo) if hi > lo else float("inf"),
        "step_bracket_busy_s": gpu_busy, "host_step_gap_fraction": tl.idle_fraction("gpu", (lo, hi)),
        "step_gaps_s": [b - a for a, b in gaps],
        "gpu_step_s_median": med([s.duration_s for s in gpu]),
        "cpu_step_s_median": med(list(cpu_by_step.values())),
        "cpu_busy_s": tl.busy_s("cpu"),
        "speedup_bound": (hi - lo) / max(gpu_busy, tl.busy_s("cpu"), 1e-12),   # host picture too
    }


def _to_device(values: list[int], dev) -> torch.Tensor:
    if dev is None or torch.device(dev).type != "cuda":
        return torch.tensor(values, dtype=torch.int64)
    return torch.tensor(values, dtype=torch.int64, pin_memory=True).to(dev, non_blocking=True)


def _tensors(batch) -> list[torch.Tensor]:
    """Every tensor of a batch, including those inside tuples (e.g. attention tiles)."""
    out: list[torch.Tensor] = []
    for v in vars(batch).values():
        if isinstance(v, torch.Tensor):
            out.append(v)
        elif isinstance(v, (tuple, list)):
            out += [t for t in v if isinstance(t, torch.Tensor)]
    return out
