"""pgqueue's core: SQL, the state machine, backoff, jobs and validation; no I/O."""
