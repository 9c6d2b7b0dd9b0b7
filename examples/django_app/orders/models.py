from __future__ import annotations

from django.db import models


class Order(models.Model):
    item = models.CharField(max_length=100)
    email = models.EmailField()
    receipt_task = models.CharField(max_length=64, default="")
    """The id of its send_receipt task's result (a pgqueue job id)."""


class Receipt(models.Model):
    """A receipt sent: one per order, which makes the task idempotent."""

    order = models.OneToOneField(Order, on_delete=models.CASCADE)
    sent_at = models.DateTimeField(auto_now_add=True)
