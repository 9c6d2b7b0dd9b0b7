"""``manage.py pgqueue_migrate``: create or upgrade the job table of ``PGQUEUE``."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from ... import get_queue


class Command(BaseCommand):
    """Apply pgqueue's schema migrations that the job table lacks (idempotent)."""

    help = "Create or upgrade pgqueue's job table (the PGQUEUE setting names it)."

    def handle(self, *args: Any, **options: Any) -> None:
        queue = get_queue()
        applied = queue.install()
        version = queue.schema_version()
        if applied:
            done = ", ".join(str(v) for v in applied)
            self.stdout.write(f"{queue.table}: schema at version {version} (applied {done})")
        else:
            self.stdout.write(f"{queue.table}: schema at version {version}, up to date")
