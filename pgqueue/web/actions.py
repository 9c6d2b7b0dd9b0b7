"""The dashboard's actions (retry, purge, cancel, pause ...): each a POST
that an admin's CSRF-checked form sends, reported to the action listeners,
and answered by a redirect to the page it came from."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final
from urllib.parse import urlencode, urlsplit

from ..core.dashboard import BadFilter, JobFilter, parse_ids
from ..core.events import ActionName
from ..core.jobs import DuplicateJob
from ..core.schedules import UnknownSchedule
from .checks import CSRF_COOKIE, local_target, pairs
from .http import Request, Response

if TYPE_CHECKING:
    from .app import Dashboard

__all__ = ["ACTIONS", "MESSAGES", "back"]

# What an action's redirect may say (by code: no text of the URL reaches the page).
MESSAGES: Final = {
    "retried": "{n} job(s) retried.",
    "purged": "{n} job(s) purged.",
    "cancelled": "{n} job(s) cancelled or asked to stop.",
    "paused": "Queue paused.",
    "resumed": "Queue resumed.",
    "schedule-paused": "Schedule paused.",
    "schedule-resumed": "Schedule resumed.",
    "triggered": "Schedule triggered: job {n} enqueued.",
    "overlap": "Not triggered: the schedule's previous job is still pending or running.",
    "no-schedule": "No such schedule.",
    "limit-set": "Limit set.",
    "nothing": "Nothing selected.",
}


def back(request: Request, done: str, n: int | None = None) -> Response:
    """303 to the page the form came from (a path of this dashboard only)."""
    parts = urlsplit(local_target(request.field("next"), request.root) or request.root + "/")
    query = [(k, v) for k, v in pairs(parts.query) if k not in ("done", "n")]
    query.append(("done", done))
    if n is not None:
        query.append(("n", str(n)))
    return Response.redirect(f"{parts.path}?{urlencode(query)}")


def on_selected(
    d: Dashboard,
    request: Request,
    act: Callable[[list[int]], list[int]],
    name: ActionName,
    done: str,
) -> Response:
    """An action on the jobs the form selected (its ``id`` fields): ``act``
    takes their ids and gives back the ids it acted on, which are reported
    and counted in the message ``done``."""
    ids = parse_ids(request.form.get("id", []))
    if not ids:
        return back(request, "nothing")
    acted = act(ids)
    d._report(request, name, job_ids=tuple(acted))
    return back(request, done, len(acted))


def retry(d: Dashboard, request: Request) -> Response:
    return on_selected(
        d, request, lambda ids: d._run(d.core.retry(ids)), ActionName.RETRY, "retried"
    )


def purge(d: Dashboard, request: Request) -> Response:
    return on_selected(
        d, request, lambda ids: d._run(d.core.purge(ids)), ActionName.PURGE, "purged"
    )


def cancel(d: Dashboard, request: Request) -> Response:
    def act(ids: list[int]) -> list[int]:
        out = d._run(d.core.queue.cancel(ids))
        return sorted(out.deleted + out.requested)

    return on_selected(d, request, act, ActionName.CANCEL, "cancelled")


def every_dead(d: Dashboard, request: Request, cookie: str) -> Response:
    action = request.field("action")
    if action not in ("retry", "purge"):
        raise BadFilter("action must be retry or purge")
    where = JobFilter.parse(
        {k: request.field(k) for k in ("queue", "kind", "unique_key", "payload")}
    )
    if request.field("confirm") != "yes":
        count = d._run(d.core.count_dead(where))
        return d._page(
            request, "confirm.html", cookie, page="dead", role="admin", action=action,
            where=where, matching=count, now=None,
            back=local_target(request.field("next"), request.root),
        )  # fmt: skip
    done = d._run(d.core.on_every_dead(where, action))
    described = " ".join(f"{k}={v}" for k, v in where.as_query().items() if k != "status")
    d._report(
        request,
        ActionName.RETRY if action == "retry" else ActionName.PURGE,
        job_ids=tuple(done),
        detail=f"every dead job matching: {described or 'all'}",
    )
    return back(request, "retried" if action == "retry" else "purged", len(done))


def queue_paused(d: Dashboard, request: Request, paused: bool) -> Response:
    name = request.field("queue")
    try:
        d._run(d.core.queue.set_paused(name, paused))
    except (TypeError, ValueError) as exc:
        raise BadFilter(str(exc)) from None
    d._report(request, ActionName.PAUSE_QUEUE if paused else ActionName.RESUME_QUEUE, target=name)
    return back(request, "paused" if paused else "resumed")


def schedule_paused(d: Dashboard, request: Request, paused: bool) -> Response:
    name = request.field("schedule")
    try:
        d._run(d.core.queue.set_schedule_paused(name, paused))
    except UnknownSchedule:
        return back(request, "no-schedule")
    except (TypeError, ValueError) as exc:
        raise BadFilter(str(exc)) from None
    name_ = ActionName.PAUSE_SCHEDULE if paused else ActionName.RESUME_SCHEDULE
    d._report(request, name_, target=name)
    return back(request, "schedule-paused" if paused else "schedule-resumed")


def trigger(d: Dashboard, request: Request) -> Response:
    name = request.field("schedule")
    try:
        job_id = d._run(d.core.queue.trigger_schedule(name))
    except UnknownSchedule:
        return back(request, "no-schedule")
    except DuplicateJob:
        return back(request, "overlap")
    except (TypeError, ValueError) as exc:
        raise BadFilter(str(exc)) from None
    d._report(request, ActionName.TRIGGER_SCHEDULE, target=name, job_ids=(job_id,))
    return back(request, "triggered", job_id)


def set_limit(d: Dashboard, request: Request) -> Response:
    key = request.field("key")
    try:
        n = int(request.field("max_running"))
        d._run(d.core.queue.set_limit(key, n))
    except (TypeError, ValueError) as exc:
        raise BadFilter(str(exc)) from None
    d._report(request, ActionName.SET_LIMIT, target=key, detail=f"max_running={n}")
    return back(request, "limit-set")


Action = Callable[["Dashboard", Request], Response]
ACTIONS: Final[dict[str, Action]] = {
    "/actions/retry": retry,
    "/actions/purge": purge,
    "/actions/cancel": cancel,
    "/actions/every-dead": lambda d, r: every_dead(d, r, r.cookies.get(CSRF_COOKIE, "")),
    "/actions/pause-queue": lambda d, r: queue_paused(d, r, True),
    "/actions/resume-queue": lambda d, r: queue_paused(d, r, False),
    "/actions/pause-schedule": lambda d, r: schedule_paused(d, r, True),
    "/actions/resume-schedule": lambda d, r: schedule_paused(d, r, False),
    "/actions/trigger-schedule": trigger,
    "/actions/set-limit": set_limit,
}
