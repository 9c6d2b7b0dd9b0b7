"""A worker module that registers pgqueue's Prometheus metrics itself, for
``--metrics-port``'s refusal to register them twice (tests/test_cli.py)."""

from pgqueue.prometheus import PrometheusMetrics

from .cli_app import worker

__all__ = ["worker"]

worker.add_event_listener(PrometheusMetrics())
