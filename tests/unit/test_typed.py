"""Typed task arguments (`pgqueue.core.typed`): encoded at enqueue, decoded to run. No database."""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any, NotRequired, TypedDict

import pydantic
import pytest
from hypothesis import given
from hypothesis import strategies as st

import pgqueue
from pgqueue.core.typed import PayloadMismatch, codec_for
from pgqueue.testing import build_job, run_job, task_job


class Size(enum.Enum):
    SMALL = "s"
    LARGE = "l"


@dataclass(frozen=True)
class Address:
    street: str
    zip: str


@dataclass(frozen=True)
class Order:
    id: uuid.UUID
    total: Decimal
    placed: datetime
    address: Address
    size: Size = Size.SMALL
    tags: list[str] = field(default_factory=list)


class Window(TypedDict):
    first: date
    last: NotRequired[date]


class Customer(pydantic.BaseModel):
    name: str
    age: int


queue = pgqueue.Queue("postgresql://127.0.0.1:1/never")


@queue.task(kind="shop.ship")
def ship(
    order: Order, window: Window, *, customer: Customer | None = None, sizes: tuple[Size, ...] = ()
) -> tuple[Any, ...]:
    return order, window, customer, sizes


ORDER = Order(
    uuid.UUID("12345678-1234-5678-1234-567812345678"),
    Decimal("12.30"),
    datetime(2026, 12, 4, 9, 30, tzinfo=UTC),
    Address("1 Main St", "04101"),
)


def test_a_typed_call_is_stored_as_stable_json() -> None:
    job = task_job(ship, ORDER, {"first": date(2026, 12, 5)}, customer=Customer(name="Ada", age=36))

    assert job.payload == {
        "args": [
            {
                "id": "12345678-1234-5678-1234-567812345678",
                "total": "12.30",
                "placed": "2026-12-04T09:30:00+00:00",
                "address": {"street": "1 Main St", "zip": "04101"},
                "size": "s",
                "tags": [],
            },
            {"first": "2026-12-05"},
        ],
        "kwargs": {"customer": {"name": "Ada", "age": 36}},
    }


def test_a_typed_call_runs_with_its_arguments_decoded_into_their_types() -> None:
    window: Window = {"first": date(2026, 12, 5), "last": date(2026, 12, 6)}
    customer = Customer(name="Ada", age=36)
    job = task_job(ship, ORDER, window, customer=customer, sizes=[Size.LARGE])

    assert run_job(ship, job) == (ORDER, window, customer, [Size.LARGE])


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "message"),
    [
        (("no order", {"first": date.today()}), {}, TypeError, "argument order must be Order"),
        ((ORDER, {"first": "2026-12-05"}), {}, TypeError, "argument window.first must be date"),
        ((ORDER, {}), {}, TypeError, "argument window lacks keys: first"),
        ((ORDER, {"first": datetime.now(UTC)}), {}, TypeError, "window.first must be date"),
        ((ORDER, {"first": date.today()}), {"customer": {"name": "Ada", "age": "old"}},
         TypeError, "field customer.age"),
        ((ORDER, {"first": date.today()}), {"sizes": ["s"]}, TypeError, r"sizes\[0\] must be Size"),
    ],
)  # fmt: skip
def test_a_bad_typed_argument_is_refused_naming_it(
    args: tuple[Any, ...], kwargs: dict[str, Any], error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        task_job(ship, *args, **kwargs)


def test_a_decimal_that_json_cannot_hold_is_refused() -> None:
    order = Order(ORDER.id, Decimal("NaN"), ORDER.placed, ORDER.address)
    with pytest.raises(ValueError, match=r"order\.total is NaN"):
        task_job(ship, order, {"first": date.today()})


def stale(payload: dict[str, Any]) -> str:
    with pytest.raises(PayloadMismatch) as failed:
        run_job(ship, build_job("shop.ship", payload, id=12))
    return str(failed.value)


def test_a_payload_that_no_longer_decodes_names_the_field() -> None:
    good = task_job(ship, ORDER, {"first": date(2026, 12, 5)}).payload
    order = good["args"][0]

    assert stale({"args": [{**order, "size": "xl"}, good["args"][1]]}) == (
        "job 12 of task shop.ship: field order.size: 'xl' is not a Size (one of 's', 'l')"
    )
    assert "field order.address.zip: missing" in stale(
        {"args": [{**order, "address": {"street": "x"}}, good["args"][1]]}
    )
    assert "field order.colour: Order has no such field now" in stale(
        {"args": [{**order, "colour": "red"}, good["args"][1]]}
    )
    assert "field window.first: '5 Dec' is not a date" in stale(
        {"args": [order, {"first": "5 Dec"}]}
    )
    assert "field customer.age" in stale(
        {"args": good["args"], "kwargs": {"customer": {"name": "Ada"}}}
    )


@given(
    st.decimals(allow_nan=False, allow_infinity=False),
    st.datetimes(timezones=st.just(UTC)),
    st.uuids(),
    st.dates(),
)
def test_text_codecs_round_trip(
    total: Decimal, placed: datetime, id_: uuid.UUID, day: date
) -> None:
    for tp, value in ((Decimal, total), (datetime, placed), (uuid.UUID, id_), (date, day)):
        codec = codec_for(tp)
        assert codec is not None
        assert codec.decode(codec.encode(value, "x"), "x") == value


def test_plain_annotations_keep_plain_json() -> None:
    assert codec_for(int) is None and codec_for(list[int]) is None and codec_for(None) is None
    job = task_job(queue.task(kind="plain")(lambda n, *, s="": (n, s)), 1, s="x")
    assert job.payload == {"args": [1], "kwargs": {"s": "x"}}
