"""The checkers' own process in grading: `python -m course_kit.grading.checks.judge ...`.

No learner code ever runs here. The grader starts it (inside its own sandbox) twice over:

    judge prepare --ids 01.a 01.b --out CASES [--hidden DIR]
        writes each check's plan (the inputs its learner function is called on) as data, once per
        grading run, for the notebooks' sandboxes to read;
    judge verdict --job JOB.json --out VERDICTS.json [--job ... --out ...] [--hidden DIR]
        reads the answers one notebook's sandbox wrote (hostile files: codec.read) and writes
        {"verdicts": {id: {"status", "message"}}, "judging": id or null}, rewritten after every answer,
        so that a judge stopped by its memory or time cap still leaves the verdicts it had reached and
        names the answer it was judging (the grader then judges the rest in a fresh process).

Hidden checkers are imported from the instructor's folder given by --hidden.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from . import codec, registry, verdict


def _plan(spec: registry.Spec) -> dict:
    return {"cases": None if spec.cases is None else [tuple(c) for c in spec.cases()],
            "instantiate": spec.instantiate, "probe": spec.probe}


def prepare(ids: list[str], out: Path) -> None:
    for exercise_id in ids:
        codec.write(out / exercise_id, _plan(registry.get(exercise_id)))


def _line(text: str, limit: int = 300) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def judge_one(item: dict, answers: Path, level: str, budget: codec.Budget) -> dict:
    """The verdict of one recorded answer: {"status", "message"}."""
    exercise_id, source = item["id"], item.get("source")
    spec = registry.get(exercise_id)
    if spec.keyed and registry.key(exercise_id) is None:   # grading with no key would pass any value
        return {"status": "error", "message": f"not graded: the instructor's answer key of {exercise_id} is "
                                              "missing (course-kit grade --hidden DIR)"}
    folder = answers / exercise_id
    try:
        os.lstat(folder)
    except OSError:
        return {"status": "none", "message": "no answer was recorded"}
    try:
        answer = codec.read(folder, budget)
    except (codec.AnswerError, OSError) as exc:
        return {"status": "error", "message": _line(f"the answer could not be read: {exc}")}
    if isinstance(answer, dict) and "unreadable" in answer:
        return {"status": "error", "message": _line(f"the answer could not be recorded: {answer['unreadable']}")}
    status, message = verdict.outcome(spec, answer, source, level)
    return {"status": status, "message": message}


def _progress(out: Path | None, verdicts: dict, judging: str | None) -> None:
    """Write the verdicts so far (atomically): a judge stopped by its caps still leaves them, and
    names the answer it was judging."""
    if out is None:
        return
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"verdicts": verdicts, "judging": judging}))
    os.replace(tmp, out)


def judge(job: dict, out: Path | None = None) -> dict:
    """Judge every answer of a job, each on its own: whatever goes wrong with one answer (an exception
    while reading or checking it) is that answer's error row, and the others are still judged."""
    answers = Path(job["answers"])
    level = job.get("level", "short")
    budget = codec.Budget()
    verdicts: dict = {}
    for item in job["checks"]:
        exercise_id = str(item.get("id"))
        _progress(out, verdicts, exercise_id)
        try:
            verdicts[exercise_id] = judge_one(item, answers, level, budget)
        except Exception as exc:  # noqa: BLE001 - one answer's problem, never the end of the judge
            first = (str(exc).splitlines() or [""])[0]
            verdicts[exercise_id] = {"status": "error", "message": _line(
                f"the answer could not be judged ({type(exc).__name__}{': ' + first if first else ''})")}
    _progress(out, verdicts, None)
    return {"verdicts": verdicts}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="course_kit.grading.checks.judge")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("--ids", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--hidden", default=None)
    v = sub.add_parser("verdict")
    v.add_argument("--job", action="append", required=True, help="a job file (repeat --job/--out for several)")
    v.add_argument("--out", action="append", required=True)
    v.add_argument("--hidden", default=None)
    args = parser.parse_args(argv)
    jobs = [json.loads(Path(j).read_text()) for j in args.job] if args.command == "verdict" else []
    if len(jobs) != len(args.out if args.command == "verdict" else jobs):
        parser.error("give one --out per --job")
    registry.use_instructor(Path(args.hidden) if args.hidden else None)   # never a tree found elsewhere
    if args.hidden:   # only the notebooks at hand: each hidden module may import torch and lessons
        ids = args.ids if args.command == "prepare" else [c["id"] for job in jobs for c in job["checks"]]
        registry.load_hidden(Path(args.hidden), {str(i)[:2] for i in ids})
    if args.command == "prepare":
        for exercise_id in args.ids:   # public checker modules load by notebook number, on demand
            try:
                registry.get(exercise_id)
            except ValueError:
                pass
        unknown = [i for i in args.ids if i not in registry.SPECS]
        if unknown:
            print(f"unknown exercise ids in the instructor's check cells: {unknown}", file=sys.stderr)
            return 2
        prepare(args.ids, Path(args.out))
        return 0
    for job, out in zip(jobs, args.out):
        judge(job, Path(out))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
