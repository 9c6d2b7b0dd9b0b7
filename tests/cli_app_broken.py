"""A worker module that fails at import, as a module with a bug does (tests/test_cli.py)."""

from __future__ import annotations

SETTINGS = {"concurrency": 4}
worker = SETTINGS["workers"]  # a KeyError at import
