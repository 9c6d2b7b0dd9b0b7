"""Django tasks of the shop, run by pgqueue."""

from __future__ import annotations

from typing import Any

from pgqueue.contrib.django.tasks_api import TaskContext

from .models import Order, Ran

try:
    from django.tasks import task
except ImportError:
    # The backport, for Django before 6.0: the same decorator.
    from django_tasks import task  # type: ignore[no-redef]


class OutOfStock(Exception):
    """A task's own exception, to see its class come back in a result."""


@task(queue_name="emails")
def send_receipt(order_id: int) -> dict[str, Any]:
    order = Order.objects.get(pk=order_id)
    order.receipt_sent = True
    order.save(update_fields=["receipt_sent"])
    Ran.objects.create(what="send_receipt", arg=str(order_id))
    return {"order": order_id, "item": order.item}


@task
def record(label: str) -> str:
    Ran.objects.create(what="record", arg=label)
    return label


@task
def reserve(item: str) -> None:
    raise OutOfStock(f"no {item} left")


@task(takes_context=True)
def whoami(context: TaskContext[Any, Any], label: str) -> dict[str, Any]:
    return {"id": context.task_result.id, "attempt": context.attempt, "label": label}


@task
async def add(a: int, b: int) -> int:
    return a + b
