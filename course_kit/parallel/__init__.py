"""Parallelism on several processes: data, tensor, pipeline, expert and context parallel.

- `launcher`: run a function on N processes (gloo on CPU, NCCL with one GPU per rank);
- `comm`: communication ops named after their forward/backward, and the alpha-beta cost model;
- `data`, `tensor`, `tp_llama`, `pipeline`, `expert`, `context`: one kind of parallelism each,
  with a `check_*` function comparing it against its single-process equivalent.
"""
from . import comm, launcher  # noqa: F401
from .launcher import Pool, RankError, launch  # noqa: F401
