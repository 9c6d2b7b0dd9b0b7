"""docs/deploy.md's files agree with the command (no database needed).

Every ``pgqueue`` command line in its systemd unit, Dockerfile and
Kubernetes manifest parses with the command's own parser, and each stop
timeout leaves the worker's ``--grace-period`` room: the grace period, the
last outcomes' flush and a claim given up (`pgqueue.core.worker`), and a
margin. A flag renamed or a timeout below the grace period fails here.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from pgqueue import cli
from pgqueue.cli.probes import HEALTH_PATHS
from pgqueue.core.worker import CLAIM_CUT, FLUSH_DEADLINE

PAGE = Path(__file__).resolve().parent.parent / "docs" / "deploy.md"
MARGIN = 5.0  # seconds beyond what the worker itself needs


def block(language: str) -> str:
    found: list[str] = re.findall(rf"```{language}\n(.*?)```", PAGE.read_text(), flags=re.S)
    [text] = found
    return text


def commands(text: str) -> list[list[str]]:
    """The pgqueue command lines of a file: Exec lines, and JSON argument lists."""
    found = []
    for line in text.splitlines():
        if m := re.match(r"Exec\w*=\S*pgqueue (.*)", line):
            found.append(shlex.split(m.group(1)))
        for array in re.findall(r'\[("pgqueue".*?)\]', line):
            found.append(json.loads(f"[{array}]")[1:])
    return found


def grace(argv: list[str]) -> float:
    args = cli.build_parser().parse_args(argv)
    assert args.grace_period is not None, f"the page gives no --grace-period: {argv}"
    return float(args.grace_period.total_seconds())


FILES = {"ini": "TimeoutStopSec=(\\d+)", "yaml": "terminationGracePeriodSeconds: (\\d+)"}


@pytest.mark.parametrize("language", ["ini", "dockerfile", "yaml"])
def test_every_command_line_parses(language: str) -> None:
    lines = commands(block(language))
    assert any(argv[0] == "worker" for argv in lines)
    for argv in lines:
        cli.build_parser().parse_args(argv)  # exits 2 on an unknown flag


@pytest.mark.parametrize(("language", "timeout"), FILES.items())
def test_the_stop_timeout_leaves_the_grace_period_room(language: str, timeout: str) -> None:
    text = block(language)
    [seconds] = re.findall(timeout, text)
    for argv in commands(text):
        if argv[0] == "worker":
            needed = grace(argv) + FLUSH_DEADLINE + CLAIM_CUT + MARGIN
            assert float(seconds) >= needed, (argv, seconds)


def test_the_unit_signals_the_supervisor_alone() -> None:
    text = block("ini")
    assert any("--processes" in argv for argv in commands(text))
    assert "KillMode=mixed" in text


def test_the_manifests_probes_ask_the_workers_health_port() -> None:
    text = block("yaml")
    [argv] = [a for a in commands(text) if a[0] == "worker"]
    args = cli.build_parser().parse_args(argv)
    ports = {name: int(n) for name, n in re.findall(r"\{name: (\w+), containerPort: (\d+)\}", text)}
    assert ports["metrics"] == args.metrics_port
    probes = {
        probe: (path, port)
        for probe, path, port in re.findall(
            r"(\w+Probe):\s*\n\s*httpGet: \{path: (\S+), port: (\w+)\}", text
        )
    }
    assert set(probes) == {"livenessProbe", "readinessProbe"}
    for probe, answer in {"livenessProbe": "live", "readinessProbe": "ready"}.items():
        path, port = probes[probe]
        assert ports[port] == args.health_port, probe
        assert HEALTH_PATHS[path] == answer, probe
