"""The reliability suite: worker processes against a real PostgreSQL, faults injected (issue 5)."""
