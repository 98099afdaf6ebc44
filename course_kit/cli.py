"""The `course-kit` command: doctor, bench, record, and the subcommands other modules register.

Bad input (an unknown topic, an unwritable folder) prints one line on stderr and exits with status 2.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from pathlib import Path

EXIT_USAGE = 2
EXIT_BUSY = 3          # `course-kit record` refused: the GPU is in use by something else


class UsageError(Exception):
    """A one-line problem with what the user asked for (exit status 2)."""


def emulation_line() -> str | None:
    """What doctor says about COURSE_KIT_EMULATE: on (and on what), set but off, or nothing."""
    from . import device
    requested = device.emulation_requested()
    if requested is None:
        return None
    emu = device.emulation()
    if emu is None:
        return (f"Emulation: {device.EMULATE_ENV}={requested.key} is set, but off: no CUDA GPU to run it on.")
    return (f"Emulation ON: {device.gpu_name()} ({device.EMULATE_ENV}={emu.key}). The course takes the "
            f"{emu.name}'s decisions (sm_{emu.capability[0]}{emu.capability[1]}, GPU memory capped at "
            f"{emu.memory_bytes / 2**30:.1f} GiB, {emu.cpu_threads} CPU threads); speeds are the real GPU's, "
            f"and records go to data/reference/{emu.slug}/.")


def _doctor(args: argparse.Namespace) -> int:
    from . import benchmarks, device, reference
    line = emulation_line()
    if line:
        print(line)
        print()
    print(device.describe())
    caps = device.capabilities()
    print()
    print("What the course can do here:")
    lines = {
        "GPU sections run live": caps.capability is not None,
        "bf16 autocast at full speed": caps.bf16_tensor_cores,
        "fp8 matmuls": caps.fp8,
        "CUDA graphs (05)": caps.cuda_graphs,
        "Triton kernels compiled (08)": caps.triton and caps.capability is not None,
        "Triton kernels interpreted on CPU (08)": caps.triton and caps.capability is None,
        "SDPA flash backend (08)": caps.sdpa_flash,
    }
    for what, ok in lines.items():
        print(f"  {'yes' if ok else 'no ':<3}  {what}")
    print(f"  size class for notebooks: {device.size_class()}  (COURSE_KIT_SMOKE=1 selects 'smoke')")
    print(f"  reference records: {', '.join(reference.available()) or 'none'} (in {reference.root()})")
    print(f"  bench topics: {', '.join(benchmarks.topics())}")
    for mod, err in benchmarks.import_errors().items():
        print(f"  warning: bench topic module {mod} failed to import: {err.strip().splitlines()[-1]}")
    return 0


def _parse_params(items: list[str]) -> dict:
    params = {}
    for item in items:
        if "=" not in item:
            raise UsageError(f"--param must look like NAME=VALUE, got {item!r}")
        key, value = item.split("=", 1)
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    return params


def _writable_folder(folder: Path) -> Path:
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise UsageError(f"cannot create output folder {folder}: {err.strerror or err}") from err
    if not os.access(folder, os.W_OK):
        raise UsageError(f"output folder {folder} is not writable")
    return folder


def _bench(args: argparse.Namespace) -> int:
    from . import bench, benchmarks, reference
    registry = benchmarks.topics()
    names = list(registry) if args.topic == "all" else [args.topic]
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise UsageError(f"unknown topic {unknown[0]!r}; choose one of: {', '.join(registry)} or all")
    params = _parse_params(args.param)
    folder = _writable_folder(Path(args.out) if args.out else reference.root() / reference.gpu_slug())
    failed = []
    for name in names:
        print(f"== course-kit bench {name}", flush=True)
        try:
            record = benchmarks.run_topic(name, params)
        except Exception as err:  # noqa: BLE001 - one failing topic must not stop `all`
            if args.topic != "all":
                raise
            print(f"   FAILED: {type(err).__name__}: {err}", file=sys.stderr)
            failed.append(name)
            continue
        print(bench.format_table(record["results"]))
        if record.get("summary"):
            print("summary:", json.dumps(record["summary"], indent=1, default=str))
        print(f"wrote {reference.save(name, record, folder=folder)}")
    return 1 if failed else 0


def _record(args: argparse.Namespace) -> int:
    """Execute every notebook with papermill on this device, one at a time, each on a GPU that nothing
    else uses (checked before it starts, stamped in its metadata; refused when busy unless
    --allow-busy); executed copies go beside the records, each plotly figure with a PNG too
    (plots/static.py), with the run's log in record.log. Each copy's headline figures are checked
    against the record of the same GPU (notebook.headline_problems) and any problem is reported."""
    from . import nbbuild, reference

    folder = _writable_folder(Path(args.out) if args.out else reference.root() / reference.gpu_slug() / "notebooks")
    notebooks = sorted(nbbuild.NOTEBOOKS.glob("[0-9][0-9]_*.ipynb"))
    if args.only:   # in the order asked (a short session records the copies it most needs first)
        notebooks = [nb for s in args.only for nb in notebooks if nb.stem.startswith(s)]
        notebooks = list(dict.fromkeys(notebooks))
        if not notebooks:
            raise UsageError(f"no notebook matches {args.only}")
    if args.finish_only:
        for nb in notebooks:
            target = folder / nb.name
            if target.is_file():
                print(f"{nb.name:<36} {_finish(target)}", flush=True)
        return 0
    from .profiling import quiet
    try:
        with quiet.lock():
            return _record_all(notebooks, folder, args)
    except quiet.Busy as err:
        print(f"course-kit record: {err}", file=sys.stderr)
        return EXIT_BUSY


def _record_all(notebooks: list[Path], folder: Path, args: argparse.Namespace) -> int:
    """Each notebook in turn, on a quiet GPU (checked, waited for, stamped), its headlines checked."""
    import papermill

    from .profiling import quiet
    failed, problems = [], 0
    # the kernels papermill starts inherit this: widgets add a PNG, progress bars stay out
    previous = os.environ.get("COURSE_KIT_STATIC_FIGURES")
    os.environ["COURSE_KIT_STATIC_FIGURES"] = "1"
    log = (folder / "record.log").open("a")
    say = lambda line: (print(line, flush=True), log.write(line + "\n"), log.flush())
    say(f"== course-kit record on {_machine_label()}, {time.strftime('%Y-%m-%d %H:%M:%S %Z')}")
    try:
        for nb in notebooks:
            state = quiet.wait_quiet(patience_s=args.wait)
            if not state["quiet"] and not args.allow_busy:
                say(f"{nb.name:<36} refused: {quiet.describe(state)}. Stop what uses the GPU and run again, "
                    f"or pass --allow-busy to record anyway (the copy is then stamped as not alone).")
                return EXIT_BUSY
            start = time.perf_counter()
            target = folder / nb.name
            try:
                papermill.execute_notebook(str(nb), str(target), cwd=str(nb.parent),
                                           kernel_name=args.kernel, progress_bar=False,
                                           execution_timeout=args.timeout)
                status = "ok"
            except Exception as err:  # noqa: BLE001 - record the rest even if one fails
                if target.is_file() and not unexpected_errors(target):
                    # the learner's build: its exercise stubs raise, as they do for a learner
                    status = "ok (exercises left unsolved, as a learner opens them)"
                else:
                    status = f"FAILED: {type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
                    failed.append(nb.name)
            found: list[str] = []
            if target.is_file():
                found = stamp(target, state, args.allow_busy)
                problems += len(found)
                status += f"  ({_finish(target)})"
            say(f"{nb.name:<36} {time.perf_counter() - start:7.1f} s  {status}  [{quiet.describe(state)}]")
            for p in found:
                say(f"    headline problem: {p}")
    finally:
        log.close()
        if previous is None:
            os.environ.pop("COURSE_KIT_STATIC_FIGURES", None)
        else:
            os.environ["COURSE_KIT_STATIC_FIGURES"] = previous
    if problems:
        print(f"course-kit record: {problems} headline figure(s) differ from the record by more than 15% without "
              f"saying so (listed above and in record.log)", file=sys.stderr)
    return 1 if failed or problems else 0


def stamp(executed: Path, state: dict, allowed_busy: bool) -> list[str]:
    """Write the GPU's state at the start into the executed copy's metadata, and the headline figures
    that differ from the record without saying so (`notebook.headline_problems`); return those."""
    from .notebook import headline_problems
    nb = json.loads(Path(executed).read_text())
    found = headline_problems(nb)
    meta = nb.setdefault("metadata", {}).setdefault("course_kit", {})
    meta["recording"] = {**state, "alone": bool(state.get("quiet")), "allowed_busy": allowed_busy,
                         "one_notebook_at_a_time": True, "headline_problems": found}
    Path(executed).write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    return found


def unexpected_errors(executed: Path) -> list[int]:
    """Indices of cells with an error output that are not tagged `raises-exception` (the learner
    build's exercise and check cells are; nbclient runs on past them, papermill still complains)."""
    nb = json.loads(Path(executed).read_text())
    return [i for i, cell in enumerate(nb.get("cells", []))
            if any(o.get("output_type") == "error" for o in cell.get("outputs", []))
            and "raises-exception" not in cell.get("metadata", {}).get("tags", [])]


def _finish(target: Path) -> str:
    """Add the PNGs and shrink one executed copy (plots/static.py); what was done, in words."""
    from .plots import static
    stats = static.finish_executed_file(target)
    text = f"{stats['images']} figures as PNG, {stats['dropped']} kept as PNG only, {stats['bytes'] / 1e6:.2f} MB"
    if stats["without_png"]:
        text += (f"; {stats['without_png']} figures without a PNG: no renderer here (pip install "
                 f"'course_kit[record]', or run `course-kit record --finish-only --out {target.parent}` where it is)")
    return text


def _machine_label() -> str:
    from . import device
    return device.gpu_name() or "CPU"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="course-kit", description="The accelerated-AI course's companion tool.")
    sub = parser.add_subparsers(dest="command", required=True)

    doctor = sub.add_parser("doctor", help="print the environment and what the course can do on it")
    doctor.set_defaults(func=_doctor)

    bench_p = sub.add_parser("bench", help="run a benchmark topic and record data/reference/<gpu>/<topic>.json")
    bench_p.add_argument("topic", help="a topic name, or 'all'")
    bench_p.add_argument("--out", help="folder for the JSON record (default data/reference/<gpu-slug>)")
    bench_p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                         help="override a parameter (JSON value), e.g. --param matmul_n=4096")
    bench_p.set_defaults(func=_bench)

    record = sub.add_parser("record", help="execute every notebook with papermill on this device")
    record.add_argument("only", nargs="*", help="notebook number prefixes (default: all)")
    record.add_argument("--out", help="folder for executed notebooks (default data/reference/<gpu-slug>/notebooks)")
    record.add_argument("--kernel", default="python3")
    record.add_argument("--timeout", type=int, default=1800, help="seconds per cell")
    record.add_argument("--finish-only", action="store_true",
                        help="execute nothing: add PNGs to the executed copies already in the folder and shrink them")
    record.add_argument("--allow-busy", action="store_true",
                        help="record even when another process computes on the GPU (the copy is stamped so)")
    record.add_argument("--wait", type=float, default=20.0,
                        help="seconds to wait for the GPU to become quiet before each notebook (default 20)")
    record.set_defaults(func=_record)

    # Subcommands owned by other modules: grading (release, grade) and serving (serve).
    for module in ("course_kit.grading.instructor.cli", "course_kit.batching.server"):
        try:
            register = getattr(importlib.import_module(module), "register", None)
        except ImportError:
            continue
        if register is not None:
            register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except (UsageError, ValueError, PermissionError) as err:
        print(f"course-kit {args.command}: error: {err}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
