"""A web dashboard for a pgqueue table, mountable in ASGI and WSGI apps.

Install the ``web`` extra (``pip install 'pgqueue-jobs[web]'``), then::

    from pgqueue.web import Dashboard

    dashboard = Dashboard("postgresql://localhost/app", authorize=my_authorize)
    app.mount("/pgqueue", dashboard.asgi)            # FastAPI, Starlette
    # Flask: DispatcherMiddleware(app.wsgi_app, {"/pgqueue": dashboard.wsgi})

or run it alone: ``pgqueue dashboard``. See docs/dashboard.md.
"""

from __future__ import annotations

try:
    import jinja2  # noqa: F401
except ImportError as exc:  # pragma: no cover - depends on the install
    raise ImportError("pgqueue.web needs the web extra: pip install 'pgqueue-jobs[web]'") from exc

from .app import ADMIN, READ, Authorize, Dashboard
from .http import Request, Response

__all__ = ["ADMIN", "READ", "Authorize", "Dashboard", "Request", "Response"]
