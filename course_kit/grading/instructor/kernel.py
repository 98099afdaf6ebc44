"""The notebook driver inside the sandbox: `python -m course_kit.grading.instructor.kernel REPLY_FD`.

It runs cells in an IPython shell (magics, `display`, `get_ipython()` work as in Jupyter) one by
one as the grader sends them on stdin (one JSON line per cell), and answers on REPLY_FD with the
cell's status. Student code runs in this process, so nothing it says is trusted: the grader uses
replies only to know when to send the next cell and to word error messages; verdicts come from
the checker's own process. An {"interrupt": true} line raises KeyboardInterrupt in the cell.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import sys
import threading


def _reader(inbox: "queue.Queue[dict]", main_thread: int) -> None:
    for line in sys.stdin:
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("interrupt"):
            signal.pthread_kill(main_thread, signal.SIGINT)
        else:
            inbox.put(msg)
    os._exit(0)  # the grader closed our stdin: the run is over


def main(reply_fd: int) -> None:
    reply = os.fdopen(reply_fd, "w", buffering=1)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    from IPython.core.interactiveshell import InteractiveShell
    shell = InteractiveShell.instance(colors="NoColor", history_length=0)
    shell.history_manager.enabled = False
    inbox: "queue.Queue[dict]" = queue.Queue()
    threading.Thread(target=_reader, args=(inbox, threading.get_ident()), daemon=True).start()
    reply.write(json.dumps({"ready": True}) + "\n")
    while True:
        try:
            msg = inbox.get()
        except KeyboardInterrupt:       # an interrupt that arrived between cells
            continue
        cell = msg.get("cell")
        try:
            result = shell.run_cell(str(msg.get("code", "")), store_history=False)
            err = result.error_before_exec or result.error_in_exec
        except KeyboardInterrupt as exc:
            err = exc
        except BaseException as exc:  # noqa: BLE001 - SystemExit and friends end this cell only
            err = exc
        out = {"cell": cell, "status": "ok" if err is None else "error"}
        if err is not None:
            out.update(ename=type(err).__name__, evalue=str(err)[:300])
        try:
            reply.write(json.dumps(out) + "\n")
        except (OSError, ValueError):
            os._exit(1)


if __name__ == "__main__":
    main(int(sys.argv[1]))
