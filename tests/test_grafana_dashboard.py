"""docs/grafana/pgqueue.json asks only for metrics pgqueue exports (no database needed).

Every metric name in the dashboard's expressions is one that
`pgqueue.prometheus.PrometheusMetrics` or `QueueStatsCollector` exports (a
counter's ``_total``, a histogram's ``_bucket``/``_sum``/``_count`` count),
and every label it filters or groups by is one of that metric's labels.
A metric or label renamed in the code fails here until the dashboard
follows.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pgqueue
from pgqueue.prometheus import PrometheusMetrics, QueueStatsCollector

DASHBOARD = Path(__file__).resolve().parent.parent / "docs" / "grafana" / "pgqueue.json"
SUFFIXES = ("_total", "_bucket", "_sum", "_count", "_created")


def exported() -> dict[str, set[str]]:
    """Every metric pgqueue exports (its family name), with its labels."""
    metrics = PrometheusMetrics(registry=None)
    names = {
        "pgqueue_jobs": set(metrics.jobs._labelnames),
        "pgqueue_job_duration_seconds": {*metrics.duration._labelnames, "le"},
    }
    queue = pgqueue.Queue("postgresql://nobody@127.0.0.1:1/unused")  # never connects
    for family in QueueStatsCollector(queue, registry=None).describe():
        names[family.name] = set(family._labelnames)
    return names


def family(sample: str) -> str:
    for suffix in SUFFIXES:
        if sample.endswith(suffix):
            return sample[: -len(suffix)]
    return sample


def expressions(node: Any) -> list[str]:
    if isinstance(node, dict):
        found = [node["expr"]] if isinstance(node.get("expr"), str) else []
        return found + [e for v in node.values() for e in expressions(v)]
    if isinstance(node, list):
        return [e for v in node for e in expressions(v)]
    return []


def test_the_dashboard_has_panels_and_a_table_variable() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert len(dashboard["panels"]) >= 5
    assert {v["name"] for v in dashboard["templating"]["list"]} >= {"table", "datasource"}


def test_every_expression_names_exported_metrics_and_their_labels() -> None:
    known = exported()
    dashboard = json.loads(DASHBOARD.read_text())
    checked = 0
    for expr in [*expressions(dashboard), dashboard["templating"]["list"][1]["query"]["query"]]:
        samples = re.findall(r"\bpgqueue_\w+", expr)
        assert samples, expr
        for sample in samples:
            assert sample in known or family(sample) in known, (sample, expr)
            labels = known.get(sample, known.get(family(sample), set()))
            used = re.findall(r"(\w+)\s*(?:=~|!=|=)", expr)
            used += [w for group in re.findall(r"by \(([^)]*)\)", expr) for w in group.split(",")]
            used += re.findall(r"label_values\(\w+, (\w+)\)", expr)
            assert {u.strip() for u in used} <= labels, (expr, labels)
            checked += 1
    assert checked >= 7
