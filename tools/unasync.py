"""Generate the sync modules from their async sources.

The async module is the one to edit; its sync twin is written from it by
dropping ``async``/``await`` and renaming the async names. ``--check``
fails (exit 1) when a generated file is not current; ``nox -s lint`` runs it.

    python tools/unasync.py          # regenerate
    python tools/unasync.py --check  # verify, for CI
"""

from __future__ import annotations

import argparse
import ast
import difflib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# (async source, sync target, docstring of the target)
MODULES = [
    (
        "pgqueue/aio/queue.py",
        "pgqueue/sync/queue.py",
        "`Queue`: the queue's operations for sync code (threads, Flask, scripts).",
    ),
    (
        "pgqueue/aio/tasks.py",
        "pgqueue/sync/tasks.py",
        "`Task`: a function made a job kind of a `Queue` (`Queue.task`).",
    ),
    (
        "pgqueue/aio/testing.py",
        "pgqueue/sync/testing.py",
        "The testing helpers for a `Queue` (`pgqueue.testing`): what is enqueued, drain.",
    ),
]

# Whole words renamed, in code and in docstrings alike.
RENAMES = {
    "AsyncQueue": "Queue",
    "AsyncTask": "Task",
    "AsyncIterator": "Iterator",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "asynccontextmanager": "contextmanager",
    "aenqueued": "enqueued",
    "aassert_enqueued": "assert_enqueued",
    "aassert_not_enqueued": "assert_not_enqueued",
    "adrain": "drain",
    "arun_job": "run_job",
}

# Prose that only one side can say.
PHRASES = {
    "for async code (asyncio or trio)": "for sync code (threads, Flask, scripts)",
}


def unasync(source: str, doc: str, origin: str) -> str:
    tree = ast.parse(source)
    first = tree.body[0]
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
        raise SystemExit(f"{origin}: expected a module docstring")
    lines = source.splitlines(keepends=True)
    body = "".join(lines[first.end_lineno :])
    header = f'"""{doc}\n\nGenerated from ``{origin}`` by ``tools/unasync.py``: do not edit.\n"""\n'
    text = header + body
    text = re.sub(r"\basync (def|with|for)\b", r"\1", text)
    text = re.sub(r"\bawait ", "", text)
    for old, new in PHRASES.items():
        text = text.replace(old, new)
    for old, new in RENAMES.items():
        text = re.sub(rf"\b{old}\b", new, text)
    return text


def ruff_format(text: str, path: str) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "ruff", "format", "--stdin-filename", path, "-"],
        input=text,
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    fixed = subprocess.run(
        [
            sys.executable,
            "-m",
            "ruff",
            "check",
            "--fix-only",
            "--quiet",
            "--stdin-filename",
            path,
            "-",
        ],
        input=done.stdout,
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
    )
    return fixed.stdout or done.stdout


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    args = parser.parse_args()
    stale = 0
    for src, dst, doc in MODULES:
        wanted = ruff_format(unasync((ROOT / src).read_text(), doc, src), dst)
        target = ROOT / dst
        current = target.read_text() if target.exists() else ""
        if current == wanted:
            continue
        if args.check:
            stale += 1
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True), wanted.splitlines(keepends=True), dst, src
                )
            )
            print(f"{dst} is out of date: run python tools/unasync.py", file=sys.stderr)
        else:
            target.write_text(wanted)
            print(f"wrote {dst}")
    return 1 if stale else 0


if __name__ == "__main__":
    raise SystemExit(main())
