"""``POST /orders``: the order and its receipt task commit together, or neither exists."""

from __future__ import annotations

import json

from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from .models import Order
from .tasks import send_receipt


class PaymentDeclined(Exception):
    pass


def charge(card: str) -> None:
    """Stands in for a payment service."""
    if card == "declined":
        raise PaymentDeclined("the card was declined")


@csrf_exempt
@require_POST
def place_order(request: HttpRequest) -> HttpResponse:
    data = json.loads(request.body)
    try:
        with transaction.atomic():
            order = Order.objects.create(item=data["item"], email=data["email"])
            # Written on Django's connection, in this block's transaction.
            result = send_receipt.enqueue(order.pk)
            order.receipt_task = result.id
            order.save(update_fields=["receipt_task"])
            charge(data.get("card", ""))
    except PaymentDeclined as exc:
        return JsonResponse({"error": str(exc)}, status=402)
    return JsonResponse({"order": order.pk, "task": result.id}, status=201)
