"""Plain pgqueue handlers of the shop, found by ``manage.py pgqueue_worker``."""

from __future__ import annotations

import pgqueue
from pgqueue.contrib import django as pgq

from .models import Ran


@pgq.handler("print_label")
def print_label(job: pgqueue.Job) -> None:
    Ran.objects.create(what="print_label", arg=str(job.payload["order_id"]))
