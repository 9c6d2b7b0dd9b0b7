"""The model of one queue table: its identifiers (`names`), the predicates
that its indexes and the statements reading them must agree on
(`predicates`), and its column lists (`columns`).

Every module that writes SQL for a queue table takes its names from here:
the statements (`pgqueue.core.sql` and the feature modules), the migrations
and the dashboard.
"""

from __future__ import annotations

from .names import TableNames, notification_channel

__all__ = ["TableNames", "notification_channel"]
