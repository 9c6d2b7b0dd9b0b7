"""An order, and a log of the jobs that ran (in the order they ran)."""

from __future__ import annotations

from django.db import models


class Order(models.Model):
    item: models.CharField[str, str] = models.CharField(max_length=100)
    receipt_sent: models.BooleanField[bool, bool] = models.BooleanField(default=False)


class Ran(models.Model):
    """One row per run of a task or handler: what ran, with what."""

    what: models.CharField[str, str] = models.CharField(max_length=100)
    arg: models.CharField[str, str] = models.CharField(max_length=100, default="")
