"""Settings of the test project: the database comes from ``PGQUEUE_DJANGO_DSN``."""

from __future__ import annotations

import importlib.util
import os

from psycopg.conninfo import conninfo_to_dict

_dsn = conninfo_to_dict(os.environ["PGQUEUE_DJANGO_DSN"])

SECRET_KEY = "tests-only"
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _dsn["dbname"],
        "USER": _dsn.get("user", ""),
        "PASSWORD": _dsn.get("password", ""),
        "HOST": _dsn.get("host", ""),
        "PORT": _dsn.get("port", ""),
    }
}

INSTALLED_APPS = [
    "pgqueue.contrib.django",
    "tests.django_project.shop",
]
if importlib.util.find_spec("django.tasks") is None:  # before Django 6: the backport
    INSTALLED_APPS.insert(0, "django_tasks")

PGQUEUE = {
    "TABLE": os.environ.get("PGQUEUE_DJANGO_TABLE", "pgqueue_jobs"),
    "WORKER": {"poll_interval": 0.1, "concurrency": 2},
}

TASKS = {
    "default": {
        "BACKEND": "pgqueue.contrib.django.backend.PgQueueBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"MAX_ATTEMPTS": 1},
    },
    "retrying": {
        "BACKEND": "pgqueue.contrib.django.backend.PgQueueBackend",
        "OPTIONS": {"MAX_ATTEMPTS": 3, "RESULT_TTL": 3600},
    },
}
