"""Parallelism on several processes: data, tensor, pipeline, expert and context parallel.

- `launcher`: run a function on N processes (gloo on CPU, NCCL with one GPU per rank);
- `comm`: communication ops named after their forward/backward, and the alpha-beta cost model;
- `data`, `tensor`, `tp_llama`, `pipeline`, `expert`, `context`: one kind of parallelism each,
  with a `check_*` function comparing it against its single-process equivalent.

Modules:

    accumulate      Gradient accumulation: the large-batch step in k micro-batches, equal to it, and its cost
    fsdp            FSDP2 (`fully_shard`) on the course model against plain DP, and ZeRO-3's bytes per rank
    recompute       Activation recomputation per block (torch.utils.checkpoint), measured and by the formula
    step_memory     The peak memory of one training step, on a GPU (allocator) and on a CPU (profiler)
    bubble          Why a measured pipeline bubble differs from (p-1)/(m+p-1): read from its own timeline
    explain         Sentences of notebook 09 about expert and context parallelism, worded from their ...
    measure         Measurements that run on every rank of a launched group (used by `course-kit bench ...
    measure_ep_cp   Expert and context parallelism measured on every rank of a launched group (used by
    oneshot         A one-shot all-reduce for small messages, through symmetric memory (GPUs joined by ...
    schedules       Pipeline schedules as pure functions: GPipe, 1F1B and interleaved 1F1B (notebook 09, ...
    sequence        Sequence parallelism: what it shards next to tensor parallelism, and the activation ...
    sp_run          Sequence parallelism run on processes (notebook 09, §4): an MLP block LayerNorm -> ...
    tp_model        A decode step's time under tensor parallelism, fitted on the 1- and 2-GPU records ...
    zero            ZeRO: shard the training state of data parallelism (notebook 09, §3).
"""
from . import comm, launcher  # noqa: F401
from .launcher import Pool, RankError, launch  # noqa: F401
