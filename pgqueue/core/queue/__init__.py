"""The queue's features, one module each: its statements (module-level
templates rendered per table, or functions of a frozen spec), and the
plans that run them (see `pgqueue.core.plans`).

`table` is what every feature renders against: a queue table's names and
the template parts they make.
"""
