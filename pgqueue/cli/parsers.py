"""How every group of subcommands adds its parsers: `leaf` for a command that runs,
`group` for a command with actions under it (``pgqueue jobs list``).

Each group module under ``pgqueue/cli/`` has one entry point,
``add_commands(commands) -> None``, which adds its commands to the
top-level subparsers with these two helpers; ``pgqueue.cli`` lists the
modules in the order of ``pgqueue --help``.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Run", "group", "leaf"]

Run = Callable[[argparse.Namespace], int]
"""What a leaf runs with its parsed arguments; its exit status."""


def leaf(
    commands: Any,
    name: str,
    run: Run,
    help: str,
    description: str | None = None,
    *,
    parents: Sequence[argparse.ArgumentParser] = (),
    raw_description: bool = False,
    **defaults: Any,
) -> argparse.ArgumentParser:
    """A command under ``commands`` that runs ``run``; its description is ``help``
    unless given. ``main`` reads ``run`` and ``subparser`` (whose usage an error
    prints) from the parsed arguments; ``defaults`` are set beside them."""
    options: dict[str, Any] = {}
    if raw_description:
        options["formatter_class"] = argparse.RawDescriptionHelpFormatter
    p: argparse.ArgumentParser = commands.add_parser(
        name, parents=list(parents), help=help, description=description or help, **options
    )
    p.set_defaults(run=run, subparser=p, **defaults)
    return p


def group(commands: Any, name: str, help: str, description: str | None = None) -> Any:
    """A command whose ACTION names one of the commands added under it: the
    subparsers to add them to."""
    p = commands.add_parser(name, help=help, description=description or help)
    p.set_defaults(subparser=p)
    return p.add_subparsers(dest="action", metavar="ACTION", required=True)
