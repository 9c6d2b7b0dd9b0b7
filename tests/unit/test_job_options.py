"""One set of job options, everywhere a job is described: `enqueue` on both
queues, `JobSpec`, a task's options and ``pgqueue enqueue``'s flags. An
option added to one and forgotten in another fails here. No database."""

from __future__ import annotations

import argparse
import dataclasses
import inspect
from typing import Any, get_type_hints

import pgqueue
from pgqueue.cli import build_parser
from pgqueue.core.tasks import PER_CALL, TaskDefaults, TaskOverrides

# What describes a job but is not one of its options (a task takes
# `PER_CALL` options per call, not as defaults).
NOT_OPTIONS = {"kind", "payload", "conn"}


def keywords(function: Any) -> set[str]:
    parameters = inspect.signature(function).parameters.values()
    return {p.name for p in parameters if p.kind is p.KEYWORD_ONLY} - NOT_OPTIONS


ENQUEUE = keywords(pgqueue.Queue.enqueue)


def test_both_queues_enqueue_with_the_same_options() -> None:
    assert keywords(pgqueue.AsyncQueue.enqueue) == ENQUEUE


def test_a_job_spec_has_every_option_of_enqueue() -> None:
    fields = {f.name for f in dataclasses.fields(pgqueue.JobSpec)} - NOT_OPTIONS
    assert fields == ENQUEUE


def test_a_task_takes_every_option_of_enqueue() -> None:
    assert set(get_type_hints(TaskOverrides)) == ENQUEUE
    assert set(get_type_hints(TaskDefaults)) == ENQUEUE - PER_CALL


def test_the_enqueue_command_has_a_flag_for_every_option() -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    enqueue = commands.choices["enqueue"]
    # The command's own arguments, less those every command takes.
    common = {a.dest for a in commands.choices["stats"]._actions}
    flags = {a.dest for a in enqueue._actions} - common - NOT_OPTIONS
    assert flags == ENQUEUE
