"""`course-kit release` and `course-kit grade`. The main CLI calls `register(subparsers)`.

    course-kit release [--source notebooks] [--out release]
    course-kit grade SUBMISSIONS_DIR --out gradebook.csv [--workers N] [--timeout S]
                     [--total-timeout S] [--memory-gb G] [--source notebooks]
"""
from __future__ import annotations

import argparse
from pathlib import Path

PROJECT = Path(__file__).resolve().parents[2]
DEFAULT_SOURCE = PROJECT / "notebooks"


def release_main(args: argparse.Namespace) -> int:
    from .release import release
    manifest = release(Path(args.source), Path(args.out))
    for nb in manifest["notebooks"]:
        ids = ", ".join(f"{e['id']} ({e['points']:g})" for e in nb["exercises"]) or "no exercises"
        print(f"{nb['notebook']}: {ids}")
    print(f"wrote {len(manifest['notebooks'])} student notebooks and manifest.json to {args.out} "
          f"({manifest['total_points']:g} points in all)")
    return 0


def grade_main(args: argparse.Namespace) -> int:
    from .grade import grade
    from .runner import Limits
    limits = Limits(cell_timeout=args.timeout, total_timeout=args.total_timeout,
                    memory_bytes=int(args.memory_gb * (1 << 30)), threads=args.threads)
    grade(Path(args.submissions), Path(args.out), Path(args.source), workers=args.workers, limits=limits)
    return 0


def add_release_parser(subparsers) -> argparse.ArgumentParser:
    p = subparsers.add_parser("release", help="write the student notebooks (solutions stubbed, hidden checks removed)")
    p.add_argument("--source", default=str(DEFAULT_SOURCE), help="instructor notebooks (default: %(default)s)")
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
    p.add_argument("--memory-gb", type=_positive(float), default=8.0, help="memory limit per notebook (default: %(default)s)")
    p.add_argument("--threads", type=_positive(int), default=1, help="CPU threads per notebook (default: %(default)s)")
    p.add_argument("--source", default=str(DEFAULT_SOURCE),
                   help="instructor notebooks with solutions and hidden checks (default: %(default)s)")
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
