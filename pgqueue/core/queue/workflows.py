"""Chains and groups: several jobs that wait for each other, written by one
operation, in one transaction (docs/workflows.md).

Both are built on ``depends_on`` (`pgqueue.core.queue.depends`): in a
chain each job depends on the one before; a group's ``then`` depends on
every job of the group.
"""

from __future__ import annotations

from dataclasses import replace

from ..jobs import ValidatedSpec
from ..plans import Operation, Plan
from ..schema.names import TableNames
from ..specs import SpecLike, validate_specs
from ..tracing import enqueue_many_trace
from .depends import DependencyStatements, Group, check_dependencies
from .enqueue import EnqueueStatements, enqueue_many, insert_one
from .limits import LimitStatements

__all__ = ["chain", "group"]


def _workflow_specs(specs: tuple[SpecLike, ...], what: str) -> list[ValidatedSpec]:
    checked = validate_specs(specs)
    if any(spec.unique is not None for spec in checked):
        raise ValueError(f"the jobs of a {what} cannot have a unique_key (not supported yet)")
    return checked


def chain(
    s: EnqueueStatements,
    limits: LimitStatements,
    names: TableNames,
    deps: DependencyStatements,
    specs: tuple[SpecLike, ...],
) -> Operation[list[int]]:
    """Jobs that run one after the other: each depends on the one before
    (and on its own ``depends_on``, if any). Their ids, in order."""
    checked = _workflow_specs(specs, "chain")
    if not checked:
        raise ValueError("a chain needs at least one job")
    trace = enqueue_many_trace(names.table_name, len(checked))

    def plan() -> Plan[list[int]]:
        waited = sorted({i for spec in checked for i in spec.depends_on})
        yield from check_dependencies(deps, names, waited)
        ids: list[int] = []
        for spec in checked:
            if ids:
                spec = replace(spec, depends_on=(*spec.depends_on, ids[-1]))
            ids.append((yield from insert_one(s, limits, names, spec, trace.context, deps)))
        trace.enqueued(ids)
        return ids

    return Operation(plan(), atomic=True, trace=trace)


def group(
    s: EnqueueStatements,
    limits: LimitStatements,
    names: TableNames,
    deps: DependencyStatements,
    specs: tuple[SpecLike, ...],
    then: SpecLike | None,
) -> Operation[Group]:
    """Jobs that run side by side, and ``then``, which runs once after all
    of them succeeded."""
    if not specs:
        raise ValueError("a group needs at least one job")
    members = enqueue_many(s, limits, names, specs, deps)
    after = None if then is None else _workflow_specs((then,), "group's then")[0]

    def plan() -> Plan[Group]:
        ids = yield from members.plan
        if after is None:
            return Group(ids)
        spec = replace(after, depends_on=(*after.depends_on, *ids))
        if after.depends_on:
            yield from check_dependencies(deps, names, list(after.depends_on))
        last = yield from insert_one(s, limits, names, spec, None, deps)
        return Group(ids, last)

    return Operation(plan(), atomic=True, trace=members.trace)
