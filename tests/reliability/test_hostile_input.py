"""Scenario 7: hostile and bad input, property-based, through every entry point that writes.

Each call either enqueues exactly the job it was given (read back and
compared: kind, payload, attempts, when it is due) or raises `TypeError`
or `ValueError` and writes nothing. The table is never damaged: its
columns stay as installed and a job enqueued before the barrage is still
there, intact, after it. `enqueue_many` is driven both below and above the
``COPY`` threshold.
"""

from __future__ import annotations

import json
import math
import uuid
from datetime import timedelta
from typing import Any

import psycopg
import psycopg.errors
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from psycopg import sql

import pgqueue
from pgqueue import JobSpec
from pgqueue.core.ops import COPY_THRESHOLD

from ..backends import open_queue
from ..conftest import Raw
from .conftest import chosen_scale

pytestmark = pytest.mark.anyio

EXAMPLES = chosen_scale().examples
PROPERTY = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

NASTY_TEXT = [
    "'; DROP TABLE pgqueue_jobs; --",
    "quote \" and ' and `",
    "back\\slash \\N \\. \\x00",
    "tab\there\nnewline\rreturn",
    "NUL \x00 inside",
    "\x00",
    "",
    "   ",
    "é 中文 🙂 \u200b \ufeff",
    "\ud800 lone surrogate",
    "x" * 256,
]

kinds = st.one_of(st.sampled_from(NASTY_TEXT), st.text(max_size=300), st.integers(), st.none())


def _deep(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = [value]
    return value


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(), inner, max_size=5),
    max_leaves=25,
)
payloads = st.one_of(
    json_values,
    st.sampled_from(NASTY_TEXT),
    st.sampled_from(
        [
            float("nan"),
            float("inf"),
            {"x": -float("inf")},
            object(),
            {1, 2},
            b"bytes",
            {"\x00": 1},
            {("tuple", "key"): 1},
            _deep(200),
            _deep(5_000),
            "y" * 1_000_000,
        ]
    ),
)
max_attempts = st.one_of(
    st.integers(min_value=-3, max_value=2**40), st.sampled_from([True, 2.0, "3", None])
)
delays = st.one_of(st.none(), st.timedeltas(), st.sampled_from([5, "1 hour", timedelta(-1)]))


def same_json(a: Any, b: Any) -> bool:
    """Equal as JSON values: numbers by value (jsonb keeps numbers as numeric)."""
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b or math.isclose(float(a), float(b), rel_tol=1e-15)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same_json(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same_json(a[k], b[k]) for k in a)
    return bool(type(a) is type(b) and a == b)


class Table:
    """The queue's table as the test sees it: rows, columns, and a canary job."""

    def __init__(self, raw: Raw, name: str) -> None:
        self.raw = raw
        self.name = name
        self.columns = self.describe()
        self.canary = self.raw.one(
            "INSERT INTO {table} (kind, payload) VALUES ('canary', '{{\"n\": 1}}') RETURNING id"
        )

    def describe(self) -> list[tuple[Any, ...]]:
        return self.raw.rows(
            "SELECT column_name, data_type, is_nullable, column_default"
            " FROM information_schema.columns WHERE table_name = %s ORDER BY ordinal_position",
            self.name,
        )

    def jobs(self) -> int:
        return self.raw.count("id <> %s", self.canary)

    def intact(self) -> bool:
        rows = self.raw.rows("SELECT kind, payload, status FROM {table} WHERE id = %s", self.canary)
        return self.describe() == self.columns and rows == [("canary", {"n": 1}, "pending")]

    def check_job(self, job_id: int, spec: JobSpec) -> None:
        """The row holds exactly what was given, due when it was asked to be."""
        [(kind, payload, attempts, max_tries, status, due_in, same)] = self.raw.rows(
            "SELECT kind, payload, attempts, max_attempts, status, run_at - created_at,"
            " payload = %s::jsonb FROM {table} WHERE id = %s",
            json.dumps(spec.payload),
            job_id,
        )
        assert (kind, attempts, max_tries, status) == (spec.kind, 0, spec.max_attempts, "pending")
        assert same, "jsonb differs from the payload's JSON"
        assert same_json(payload, spec.payload)
        assert due_in == (spec.delay or timedelta(0))
        self.raw.rows("DELETE FROM {table} WHERE id = %s", job_id)


@pytest.fixture
def table_state(queue: Any, raw: Raw, table: str) -> Table:
    return Table(raw, table)


@PROPERTY
@given(kind=kinds, payload=payloads, attempts=max_attempts, delay=delays)
@example(kind="k", payload="\ud800 lone surrogate", attempts=3, delay=None)
@example(kind="\udc00", payload=None, attempts=3, delay=None)
@example(kind="k", payload=None, attempts=3, delay=timedelta(days=2_912_108))
@example(kind="k", payload=None, attempts=3, delay=timedelta.max)
async def test_enqueue_writes_one_faithful_job_or_raises_and_writes_nothing(
    queue: Any, table_state: Table, kind: Any, payload: Any, attempts: Any, delay: Any
) -> None:
    try:
        job_id = await queue.enqueue(kind, payload, max_attempts=attempts, delay=delay)
    except (TypeError, ValueError) as exc:
        assert str(exc)
        assert table_state.jobs() == 0
    else:
        assert table_state.jobs() == 1
        table_state.check_job(job_id, JobSpec(kind, payload, delay=delay, max_attempts=attempts))
    assert table_state.intact()


def _no_nul(value: Any) -> bool:
    """No NUL anywhere in the value: jsonb cannot store one, so it is rightly refused."""
    if isinstance(value, str):
        return "\x00" not in value
    if isinstance(value, list):
        return all(_no_nul(v) for v in value)
    if isinstance(value, dict):
        return all(_no_nul(k) and _no_nul(v) for k, v in value.items())
    return True


valid_kinds = st.text(min_size=1, max_size=255).filter(lambda k: k.strip() and "\x00" not in k)
valid_payloads = json_values.filter(_no_nul)
valid_delays = st.one_of(
    st.none(), st.timedeltas(min_value=timedelta(0), max_value=timedelta(days=365 * 100))
)


@PROPERTY
@given(
    kind=valid_kinds,
    payload=valid_payloads,
    attempts=st.integers(min_value=1, max_value=2**31 - 1),
    delay=valid_delays,
)
@example(kind="k", payload="\\u0000 is six characters, not NUL", attempts=3, delay=None)
@example(kind="k", payload={"\\u0000": "a key, not NUL"}, attempts=3, delay=None)
@example(kind="'; DROP TABLE x; --", payload=1e300, attempts=2**31 - 1, delay=None)
async def test_valid_input_is_never_refused(
    queue: Any, table_state: Table, kind: str, payload: Any, attempts: int, delay: Any
) -> None:
    job_id = await queue.enqueue(kind, payload, max_attempts=attempts, delay=delay)
    table_state.check_job(job_id, JobSpec(kind, payload, delay=delay, max_attempts=attempts))
    [many] = await queue.enqueue_many([JobSpec(kind, payload, delay=delay, max_attempts=attempts)])
    table_state.check_job(many, JobSpec(kind, payload, delay=delay, max_attempts=attempts))
    assert table_state.intact()


specs = st.builds(JobSpec, kind=kinds, payload=payloads, delay=delays, max_attempts=max_attempts)


@PROPERTY
@given(
    hostile=st.lists(specs, min_size=1, max_size=4),
    copy=st.booleans(),
    places=st.lists(st.integers(min_value=0), min_size=4, max_size=4),
)
async def test_enqueue_many_writes_every_job_faithfully_or_nothing_at_all(
    queue: Any, table_state: Table, hostile: list[JobSpec], copy: bool, places: list[int]
) -> None:
    size = COPY_THRESHOLD + 10 if copy else 5
    batch: list[Any] = [JobSpec("filler", {"i": i}) for i in range(size - len(hostile))]
    for spec, place in zip(hostile, places, strict=False):
        batch.insert(place % (len(batch) + 1), spec)
    try:
        ids = await queue.enqueue_many(batch)
    except (TypeError, ValueError) as exc:
        assert str(exc)
        assert table_state.jobs() == 0
    else:
        assert len(ids) == len(set(ids)) == size
        assert table_state.jobs() == size
        for job_id, spec in zip(ids, batch, strict=True):
            table_state.check_job(job_id, spec)
    assert table_state.intact()


table_names = st.one_of(
    st.sampled_from(["jobs; DROP TABLE x", 'a"b', "public.ok_name", "Mixed_Case", "select"]),
    st.text(max_size=70),
    st.from_regex(r"\A(public\.)?[A-Za-z_][A-Za-z0-9_]{0,60}\Z"),
)


@settings(PROPERTY, max_examples=max(10, EXAMPLES // 2))
@given(name=table_names)
async def test_a_table_name_is_refused_or_makes_a_working_queue_of_that_name(
    dsn: str, raw: Raw, backend: str, name: str
) -> None:
    # A unique prefix keeps examples apart; the name under test is the rest.
    unique = f"h{uuid.uuid4().hex[:6]}"
    if name.startswith("public."):
        name = f"public.{unique}{name[len('public.') :]}"
    else:
        name = unique + name
    tables_before = raw.one("SELECT count(*) FROM pg_class")
    try:
        async with open_queue(backend, dsn, table=name) as q:
            await q.install()
            job_id = await q.enqueue("k", {"table": name})
            job = await q.get(job_id)
            assert job is not None and job.payload == {"table": name}
    except (TypeError, ValueError) as exc:
        assert "table name" in str(exc)
        assert raw.one("SELECT count(*) FROM pg_class") == tables_before
    except psycopg.errors.InvalidSchemaName:
        # A well-formed "schema.table" in a schema that does not exist (".A"
        # after the prefix): the server refuses it, and nothing is written.
        assert "." in name and not name.startswith("public.")
        assert raw.one("SELECT count(*) FROM pg_class") == tables_before
    else:
        parts = name.split(".")
        assert raw.one("SELECT to_regclass(%s) IS NOT NULL", sql.Identifier(*parts).as_string())
        raw.conn.execute(sql.SQL("DROP TABLE {}").format(sql.Identifier(*parts)))


def test_the_hostile_strings_are_what_they_claim() -> None:
    # Guards the fixed cases above against an editor that "cleans" them.
    assert "\x00" in NASTY_TEXT[4] and "\ud800" in NASTY_TEXT[9]
    assert len(NASTY_TEXT[10]) > pgqueue.core.jobs.MAX_KIND_LENGTH


@pytest.mark.parametrize(
    "name", ["a\nforged line", "cr\rhere", "tab\there", "esc\x1b[31m", "nel\x85"]
)
async def test_a_queue_or_schedule_name_with_a_control_character_is_refused(
    queue: Any, table_state: Table, name: str
) -> None:
    # Such a name would reach log lines and pages as it is: a newline forges a line.
    with pytest.raises(ValueError, match="queue name must not contain control characters"):
        await queue.enqueue("k", queue=name)
    with pytest.raises(ValueError, match="queue name must not contain control characters"):
        await queue.enqueue_many([JobSpec("k", queue=name)])
    with pytest.raises(ValueError, match="queue name must not contain control characters"):
        await queue.pause_queue(name)
    with pytest.raises(ValueError, match="schedule name must not contain control characters"):
        await queue.pause_schedule(name)
    assert table_state.jobs() == 0 and table_state.intact()
    pause_records = sql.SQL("SELECT count(*) FROM {}").format(
        sql.Identifier(f"{table_state.name}_queues")
    )
    assert table_state.raw.conn.execute(pause_records).fetchone() == (0,)


@pytest.mark.parametrize(
    "name",
    ["pg_temp.jobs", "PG_TEMP.jobs", "pg_temp_3.jobs", "pg_catalog.jobs", "pg_toast.jobs",
     "information_schema.jobs"],
)  # fmt: skip
def test_a_table_in_a_temporary_or_system_schema_is_refused(name: str) -> None:
    # pg_temp would take the jobs away with the connection that wrote them.
    with pytest.raises(ValueError, match="in a temporary or system schema"):
        pgqueue.core.ops.QueueCore(name)
