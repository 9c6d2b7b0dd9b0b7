"""A Flask app for ``flask pgqueue worker`` run in a process of its own
(tests/test_worker_flags.py): its DSN and table come from the environment,
and its one task prints which worker ran which job."""

from __future__ import annotations

import os

from flask import Flask

from pgqueue import job_context
from pgqueue.contrib.flask import PgQueue

pgq = PgQueue()

app = Flask(__name__)
app.config.update(PGQUEUE_DSN=os.environ["PGQUEUE_DSN"], PGQUEUE_TABLE=os.environ["PGQUEUE_TABLE"])
pgq.init_app(app)


@pgq.task(kind="note")
def note(text: str) -> None:
    job = job_context().job
    print(f"ran {job.id} ({text}) by {job.locked_by}", flush=True)
