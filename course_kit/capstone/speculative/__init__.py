"""Speculative decoding on a target and a draft model that the course trains itself (notebook 10).

A random draft never agrees with a random target, so the lesson needs trained models; nothing is
downloaded at run time, so the course trains its own pair on text every machine has.

    corpus      the Python standard library's sources: the file list, the held-out split, a byte-level
                BPE (or one token per byte)
    pair        the target's and the draft's shapes (and why), where the checkpoints live, loading,
                held-out perplexity
    train_pair  the training loop (notebook 02's precision modes and loss scaler) and
                `python -m course_kit.capstone.speculative.train_pair`
    steps       a pass over M new tokens of one sequence on a static cache: the draft's step and the
                target's verify step (the model's own layers, or notebook 05's Triton kernels)
    rules       what is kept of a draft (greedy; the rejection rule of Leviathan et al. and Chen et
                al.) and the expected speed-up
    decoder     `SpeculativeDecoder`: draft, verify, accept, roll back; one CUDA graph per round (its
                greedy acceptance on the Triton path: cuda_graphs/decode_kernels/accept.py)
    at_batch    why speculation pays less as the batch grows: the roofline of a round at batch B
    measure     tokens/s of every peer measured one way, acceptance per position, step costs, HF's
                assisted generation
    explain     the "what just happened" sentences, from the numbers

Widget `widgets/speculative.py`, figures `plots/speculative.py`, record `course-kit bench speculative`
(`benchmarks/speculative.py`).
"""
