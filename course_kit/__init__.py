"""course_kit: the real implementations behind the accelerated-AI course notebooks.

One package per lecture holds its lesson code; the foundation and the cross-cutting layers sit
beside them. DESIGN.md draws the whole map (lecture -> package -> widget -> plot -> benchmark ->
checks).

Lectures:
    roofline        00 start here: measured bandwidth and matmul FLOP/s, an operation's place under them
    dtypes          01 number formats: layouts, limits, rounding, quantisation, memory per dtype
    amp             02 autocast, loss scaling, GradScaler, one training step per precision mode
    compile_modes   03 torch.compile's modes: timing, graph breaks, recompiles, generated code
    capture         04 graph capture: jit.trace, jit.script, fx, torch.export, and their traps
    cuda_graphs     05 launch overhead, capture and replay, a decode step per batch size, Triton step
    batching        06 the engine served and loaded: live runs, the server, load clients
    streams         07 CUDA streams, events and overlap, and their CPU stand-in
    attention       08 every way the course computes attention, up to Triton and Gluon kernels
    parallel        09 data, tensor, pipeline, expert and context parallelism on several processes
    capstone        10 the technique ladder of the capstone workload; speculative decoding on the
                    course's own trained pair
Core, shared by lectures:
    models          the course's Llama (loads HF weights), caches, sampling, a tiny GPT
    engine          the inference engine: scheduler, block manager, model runner, async loop (06, 07, 10)
Foundation:
    device          what the machine can do: GPU, capability, dtype, sizes, peaks (the one owner of
                    device, capability and dtype decisions)
    gpu_specs       the vendors' datasheet peaks of the GPUs the course meets (device.peaks)
    bench           honest timing: warm-up, CUDA events, medians, rotation; the bench topic registry
    reference       recorded results under data/reference/<gpu-slug>/
    paths           where the data lives (data/reference, data/traces, data/models): the one rule
    traces          where request traces live (data/traces/) and how a name finds one
    narrate         the words of "what just happened": comparisons whose wording follows the numbers
    profiling       the profiler as the instrument: GPU idle from kernel intervals, traces, memory
                    snapshots, TORCH_LOGS (03, 05, 07, 10, 02)
Layers on top:
    plots           pure functions that return plotly figures; one module per topic
    widgets         ipywidgets UIs on the lessons' pure functions
    notebook        the thin notebook layer: show real source, banners, records, OOM as a skip
    benchmarks      one module per `course-kit bench TOPIC`
    grading         exercise checks and, apart, the instructor's release and grade tools
    benchtable      the README's benchmarks table, rendered from the records
    nbbuild         the learner's, solved and CI builds of every notebook from its source
    colab           what every notebook's setup cell does on Colab; the course wheel (make wheel)
    lab             what make lab sets in JupyterLab: widget state saved, stale widgets as a re-run note
    torch_install   how make lab and make test install torch (the CPU build on a machine with no NVIDIA GPU)
    cli             the `course-kit` command: doctor, bench, record, serve, release, grade
    _moved          old import paths of modules that moved into lecture packages, still served
"""

__version__ = "0.1.0"

from . import _moved

_moved.install()   # old import paths (a notebook saved before the move) still resolve
