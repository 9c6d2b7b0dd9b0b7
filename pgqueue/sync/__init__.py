"""The sync API: `Queue` and `Worker` on psycopg's blocking connections."""
