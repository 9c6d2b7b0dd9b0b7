"""The Django app: ``INSTALLED_APPS = [..., "pgqueue.contrib.django"]``."""

from __future__ import annotations

from django.apps import AppConfig


class PgQueueConfig(AppConfig):
    """Brings the ``pgqueue_worker`` and ``pgqueue_migrate`` commands; it has no models."""

    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
