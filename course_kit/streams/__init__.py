"""CUDA streams, events and overlap: demonstrations on a GPU, and their CPU stand-in.

- `timeline`: spans on lanes, idle fraction, the bound on the speed-up from overlap;
- `recorder`: host clocks and CUDA events on one timeline;
- `gpu`: measured demonstrations of streams, events, races and copy/compute overlap (needs CUDA);
- `host`: the sync and async decode loops with a worker thread standing in for the GPU;
- `async_loop`: the engine driven by an asyncio loop (`AsyncEngine`): streaming, aborts, and the host
  preparing step N+1 while the device runs step N (notebooks 06, 07 and 10).

Modules:

    explain         What a sync/async pair of timelines shows, in words that follow the numbers ...
    sweep           What a `course-kit bench async` sweep shows across batch sizes and models ...
"""
from .timeline import Span, Timeline, idle_fraction, speedup_bound_from_idle
from .recorder import EventRecorder
from .host import HostDevice, ToyDecoder, compare, decode_loop, prepare_inputs
from . import gpu

__all__ = ["Span", "Timeline", "idle_fraction", "speedup_bound_from_idle", "EventRecorder",
           "HostDevice", "ToyDecoder", "compare", "decode_loop", "prepare_inputs", "gpu"]
