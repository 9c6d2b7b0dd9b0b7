"""How pgqueue reaches PostgreSQL, shared by the sync and the async API.

`settings`: what every connection is made with. `blocking`: the driver
that runs core plans on blocking psycopg connections (`pgqueue.Queue`, and
`pgqueue.AsyncQueue` on trio from worker threads). `waiting`: the blocking
wait for a job's result. Neither `pgqueue.sync` nor `pgqueue.aio` imports
the other.
"""
