"""The shop as an ASGI application, with pgqueue's dashboard under /pgqueue/.

    pip install 'pgqueue-jobs[django,web]'
    cd examples/django_app
    DASHBOARD_TOKEN=change-me-to-16-chars-or-more uvicorn shop_site.asgi:application

Django has no mount: requests under /pgqueue/ go to the dashboard, the rest
to Django. The dashboard shows the job table of the ``PGQUEUE`` setting and
lets in requests that carry ``Authorization: Bearer $DASHBOARD_TOKEN``; a
real site would look at its own session instead (``authorize`` receives
the ASGI scope as ``request.raw``). Without ``DASHBOARD_TOKEN`` it lets no
one in.
"""

from __future__ import annotations

import os
from typing import Any

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_site.settings")
django_app = get_asgi_application()  # sets Django up: what follows may read its settings

from pgqueue.contrib.django import get_queue  # noqa: E402
from pgqueue.web import Dashboard  # noqa: E402
from pgqueue.web.standalone import token_authorize  # noqa: E402

PREFIX = "/pgqueue"


# The bearer check of `pgqueue dashboard`'s --token (no one, without a token).
authorize = token_authorize(token=os.environ.get("DASHBOARD_TOKEN") or None, basic=None)
dashboard = Dashboard(get_queue(), authorize=authorize)


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] == "http" and scope["path"].startswith(PREFIX + "/"):
        scope = {**scope, "root_path": scope.get("root_path", "") + PREFIX}
        return await dashboard.asgi(scope, receive, send)
    return await django_app(scope, receive, send)
