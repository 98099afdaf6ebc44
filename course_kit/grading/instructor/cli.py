"""`course-kit release` and `course-kit grade`. The main CLI calls `register(subparsers)`.

    course-kit release [--source build/solved] [--out release]
    course-kit grade SUBMISSIONS_DIR --out gradebook.csv [--workers N] [--timeout S]
                     [--total-timeout S] [--memory-gb G] [--cpus C] [--disk-mb M] [--max-bytes B]
                     [--feedback short|full]
                     [--source build/solved] [--hidden instructor/hidden_checks] [--trusted]
"""
from __future__ import annotations

import argparse
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[3]
# The instructor's tree: the solved build (solutions and hidden check cells), generated from
# notebooks/src; notebooks/ holds the learner's build.
DEFAULT_SOURCE = PROJECT / "build" / "solved"


def _source(text: str) -> Path:
    """The instructor notebooks; the default solved build is generated when it is missing."""
    path = Path(text)
    if path == DEFAULT_SOURCE and not path.is_dir():
        import subprocess
        import sys
        print(f"building the solved notebooks into {path} (python -m course_kit.nbbuild --solved {path})")
        subprocess.run([sys.executable, "-m", "course_kit.nbbuild", "--solved", str(path)], check=True,
                       cwd=PROJECT)
    return path


def release_main(args: argparse.Namespace) -> int:
    from .release import release
    manifest = release(_source(args.source), Path(args.out))
    for nb in manifest["notebooks"]:
        ids = ", ".join(f"{e['id']} ({e['points']:g})" for e in nb["exercises"]) or "no exercises"
        print(f"{nb['notebook']}: {ids}")
    print(f"wrote {len(manifest['notebooks'])} student notebooks and manifest.json to {args.out} "
          f"({manifest['total_points']:g} points in all)")
    return 0


def grade_main(args: argparse.Namespace) -> int:
    from .grade import NoSandbox, grade
    from .sandbox import Limits
    limits = Limits(cell_timeout=args.timeout, total_timeout=args.total_timeout,
                    memory_bytes=int(args.memory_gb * (1 << 30)), threads=args.threads,
                    disk_bytes=int(args.disk_mb * (1 << 20)), cpus=args.cpus)
    try:
        grade(Path(args.submissions), Path(args.out), _source(args.source), workers=args.workers, limits=limits,
              hidden=Path(args.hidden) if args.hidden else None, feedback_level=args.feedback,
              max_bytes=args.max_bytes, trusted=args.trusted)
    except (NoSandbox, ValueError) as exc:   # no sandbox, too little disk, a bad option: one line, no traceback
        print(f"course-kit grade: {exc}")
        return 2
    return 0


def add_release_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("release", help="write the student notebooks (solutions stubbed, hidden checks removed)")
    p.add_argument("--source", default=str(DEFAULT_SOURCE), help="instructor notebooks, solved (default: %(default)s, built if missing)")
    p.add_argument("--out", default="release", help="output folder (default: %(default)s)")
    p.set_defaults(func=release_main)
    return p


def _positive(kind):
    def parse(text: str):
        value = kind(text)
        if value <= 0:
            raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
        return value
    return parse


def add_grade_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("grade", help="run and grade submissions (one folder per student) into a gradebook CSV")
    p.add_argument("submissions", help="folder with one sub-folder per student")
    p.add_argument("--out", default="gradebook.csv", help="gradebook CSV (default: %(default)s)")
    p.add_argument("--workers", type=_positive(int), default=1, help="notebooks graded at once")
    p.add_argument("--timeout", type=_positive(float), default=120.0, help="seconds per cell (default: %(default)s)")
    p.add_argument("--total-timeout", type=_positive(float), default=1800.0,
                   help="seconds per notebook (default: %(default)s)")
    p.add_argument("--memory-gb", type=_positive(float), default=8.0,
                   help="memory cap of one notebook's run, all its processes together (default: %(default)s)")
    p.add_argument("--threads", type=_positive(int), default=1, help="CPU threads per notebook (default: %(default)s)")
    p.add_argument("--cpus", type=_positive(float), default=1.0,
                   help="CPU time of one notebook's run, all its processes together, in CPUs (cgroup; "
                        "default: %(default)s)")
    p.add_argument("--disk-mb", type=_positive(float), default=256.0,
                   help="size cap, in MiB, of what one notebook's run may write: its answers and each of its "
                        "private folders (default: %(default)s)")
    p.add_argument("--max-bytes", type=_positive(int), default=20 << 20,
                   help="largest notebook file read, in bytes (default: %(default)s, 20 MiB)")
    p.add_argument("--feedback", choices=("short", "full"), default="short",
                   help="short: what is wrong and on which input; full: also the expected values")
    p.add_argument("--source", default=str(DEFAULT_SOURCE),
                   help="instructor notebooks with solutions and check cells (default: %(default)s, built if missing)")
    p.add_argument("--hidden", default=None,
                   help="folder of hidden checkers (default: instructor/hidden_checks of the checkout)")
    p.add_argument("--trusted", action="store_true",
                   help="run without a sandbox where none can be made (only for code you trust)")
    p.set_defaults(func=grade_main)
    return p


def register(subparsers) -> None:
    """Add `release` and `grade` to the course-kit command."""
    add_release_parser(subparsers)
    add_grade_parser(subparsers)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course-kit")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
