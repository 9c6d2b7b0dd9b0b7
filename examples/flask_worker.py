"""The worker of examples/flask_app.py, as a `pgqueue.Worker` object.

    pgqueue worker examples.flask_worker:worker                # until Ctrl-C or SIGTERM
    pgqueue worker examples.flask_worker:worker --until-empty  # drain, then exit
    python examples/flask_worker.py [--until-empty]            # the same, without the command

``flask --app examples/flask_app.py pgqueue worker`` runs the same worker
through the Flask extension's command; this module is for the ``pgqueue
worker`` command (its ``--metrics-port``, ``--trio`` and other options) and
for programs that build their worker themselves. It needs the app's tables
(``python examples/flask_app.py --init-db``) and reads ``PGQUEUE_DSN`` and
``PGQUEUE_TABLE`` as the app does.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

# The app's module lies beside this one, however this one was started.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from flask_app import create_app, pgq

app = create_app()
# The extension's handlers, each run in the app's context; PGQUEUE_WORKER's options.
worker = pgq.worker(app)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--until-empty", action="store_true", help="drain, then exit")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    try:
        worker.run(until_empty=args.until_empty)
    finally:
        pgq.close(app)
