"""The example shop's manage.py: ``python examples/django_app/manage.py demo``.

Reads ``PGQUEUE_DSN`` (the database, default postgresql://localhost/shop)
and ``PGQUEUE_TABLE`` (the job table, default ``pgqueue_jobs``).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "shop_site.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
