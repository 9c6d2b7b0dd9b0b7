"""The shop's Django tasks: pgqueue jobs, run by ``manage.py pgqueue_worker``."""

from __future__ import annotations

from typing import Any

from .models import Order, Receipt

try:
    from django.tasks import task  # Django 6 and later
except ImportError:
    from django_tasks import task  # the same API before Django 6


@task(queue_name="emails", priority=10)
def send_receipt(order_id: int) -> dict[str, Any]:
    """Send an order's receipt once, however often the task runs (at-least-once delivery)."""
    order = Order.objects.get(pk=order_id)
    receipt, created = Receipt.objects.get_or_create(order=order)
    if created:
        print(f"receipt for order {order.pk} ({order.item}) sent to {order.email}")
    return {"order": order.pk, "sent_at": receipt.sent_at.isoformat()}
