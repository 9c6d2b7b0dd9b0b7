"""Settings of the example shop: one PostgreSQL database, used by the ORM and by pgqueue."""

from __future__ import annotations

import importlib.util
import os

from psycopg.conninfo import conninfo_to_dict

from pgqueue.embedded import local_dsn

# Unset, the local server that `pgqueue embedded start` keeps (started if need be).
_db = conninfo_to_dict(os.environ.get("PGQUEUE_DSN") or local_dsn())

SECRET_KEY = "example-only"
DEBUG = False
ALLOWED_HOSTS = ["localhost", "testserver"]
USE_TZ = True
TIME_ZONE = "UTC"
ROOT_URLCONF = "shop_site.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",  # on psycopg 3
        "NAME": _db.get("dbname", "shop"),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}

INSTALLED_APPS = [
    "pgqueue.contrib.django",  # manage.py pgqueue_worker and pgqueue_migrate
    "orders",
]
if importlib.util.find_spec("django.tasks") is None:  # before Django 6: the backport
    INSTALLED_APPS.insert(0, "django_tasks")

# The job table; its database is DATABASES["default"] unless "DATABASE" says otherwise.
PGQUEUE = {
    "TABLE": os.environ.get("PGQUEUE_TABLE", "pgqueue_jobs"),
    "WORKER": {"concurrency": 4},
}

# Django's task framework, on pgqueue.
TASKS = {
    "default": {
        "BACKEND": "pgqueue.contrib.django.backend.PgQueueBackend",
        "QUEUES": ["default", "emails"],
        "OPTIONS": {"RESULT_TTL": 24 * 3600, "MAX_ATTEMPTS": 5},
    }
}
