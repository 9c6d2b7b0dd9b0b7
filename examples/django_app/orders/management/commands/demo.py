"""``manage.py demo``: place orders through the view; ``--report``: what they left behind."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.test import Client

from pgqueue.contrib import django as pgq

from ...models import Order
from ...tasks import send_receipt


class Command(BaseCommand):
    help = "Place two orders through POST /orders (one declined), or report on them."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--report", action="store_true")

    def handle(self, *args: Any, **options: Any) -> None:
        if options["report"]:
            self.report()
            return
        client = Client()
        for card in ("ok", "declined"):
            body = {"item": "teapot", "email": "ann@example.com", "card": card}
            response = client.post("/orders", json.dumps(body), content_type="application/json")
            self.stdout.write(f"card {card}: {response.status_code} {response.json()}")
        counts = {s.value: n for s, n in pgq.get_queue().stats().by_status.items() if n}
        self.stdout.write(f"orders: {Order.objects.count()}, jobs: {counts}")

    def report(self) -> None:
        for order in Order.objects.order_by("pk"):
            result = send_receipt.get_result(order.receipt_task)
            self.stdout.write(f"order {order.pk}: task {result.id} {result.status}")
            if result.is_finished:
                self.stdout.write(f"  returned {result.return_value}")
