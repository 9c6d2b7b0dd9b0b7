"""Typed task arguments: encoded to stable JSON at enqueue, decoded at run time.

A task parameter annotated with a dataclass, a ``TypedDict``, an ``Enum``,
``datetime``, ``date``, ``Decimal``, ``UUID`` or a pydantic model (and
``list[...]``, ``dict[str, ...]``, ``X | None`` of them) gets a `Codec`.
At enqueue the argument is checked against its annotation and encoded
(`Codec.encode`: a `TypeError` or `ValueError` naming the argument, before
anything is written); when the job runs, the payload's value is decoded
back into the type (`Codec.decode`), and a value that no longer fits (the
type changed since the job was enqueued) raises `PayloadMismatch` naming
the field, which fails the job with that ``last_error``.

The encoding, stable so that a job enqueued by one release runs on the
next (docs/tasks.md, "Typed arguments"):

==========================  ==========================================
``datetime``, ``date``      ISO 8601 text (``isoformat()``)
``Decimal``                 its text (``"12.30"``: exact)
``UUID``                    its text, hyphenated
``Enum``                    its ``value``
dataclass, ``TypedDict``    an object of its fields, each encoded by its annotation
pydantic model              ``model_dump(mode="json")``; read back with ``model_validate``
==========================  ==========================================

Annotations without a codec (``int``, ``str``, ``list[int]``, none) keep
the JSON check of `pgqueue.core.tasks`.
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import types
import typing
import uuid
from collections.abc import Callable, Mapping
from datetime import date, datetime
from decimal import Decimal, InvalidOperation
from typing import Any, Union, get_args, get_origin, is_typeddict

__all__ = ["Codec", "PayloadMismatch", "SignatureCodecs", "codec_for", "signature_codecs"]


class PayloadMismatch(TypeError):
    """A typed task's stored argument no longer decodes into its parameter's type."""


class Codec:
    """Encode a value of one annotation to JSON, and decode it back."""

    def encode(self, value: Any, path: str) -> Any:
        raise NotImplementedError

    def decode(self, value: Any, path: str) -> Any:
        raise NotImplementedError


def _name(tp: Any) -> str:
    return getattr(tp, "__name__", None) or repr(tp)


def _wrong(value: Any, tp: Any, path: str) -> TypeError:
    return TypeError(f"argument {path} must be {_name(tp)}, not {type(value).__name__}")


def _mismatch(path: str, why: str) -> PayloadMismatch:
    return PayloadMismatch(f"field {path}: {why}")


@dataclasses.dataclass(frozen=True)
class TextCodec(Codec):
    """``datetime``, ``date``, ``Decimal``, ``UUID``: stored as text."""

    tp: type

    def encode(self, value: Any, path: str) -> Any:
        # A datetime is a date: it would not read back as one.
        if not isinstance(value, self.tp) or (self.tp is date and isinstance(value, datetime)):
            raise _wrong(value, self.tp, path)
        if isinstance(value, Decimal):
            if not value.is_finite():
                raise ValueError(f"argument {path} is {value}, which JSON cannot hold")
            return str(value)
        if isinstance(value, date):
            return value.isoformat()
        return str(value)

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, str):
            raise _mismatch(path, f"expected {_name(self.tp)} text, got {value!r:.80}")
        try:
            if self.tp is datetime:
                return datetime.fromisoformat(value)
            if self.tp is date:
                return date.fromisoformat(value)
            if self.tp is Decimal:
                return Decimal(value)
            return uuid.UUID(value)
        except (ValueError, InvalidOperation) as exc:
            raise _mismatch(path, f"{value!r:.80} is not a {_name(self.tp)} ({exc})") from None


@dataclasses.dataclass(frozen=True)
class EnumCodec(Codec):
    tp: type[enum.Enum]

    def encode(self, value: Any, path: str) -> Any:
        if not isinstance(value, self.tp):
            raise _wrong(value, self.tp, path)
        return value.value

    def decode(self, value: Any, path: str) -> Any:
        try:
            return self.tp(value)
        except ValueError:
            known = ", ".join(repr(m.value) for m in self.tp)
            raise _mismatch(
                path, f"{value!r:.80} is not a {_name(self.tp)} (one of {known})"
            ) from None


@dataclasses.dataclass(frozen=True)
class FieldsCodec(Codec):
    """A dataclass or a ``TypedDict``: an object of its fields."""

    tp: type
    fields: Mapping[str, Codec | None]
    required: frozenset[str]
    is_dict: bool

    def encode(self, value: Any, path: str) -> Any:
        if self.is_dict:
            if not isinstance(value, dict):
                raise _wrong(value, self.tp, path)
            extra = value.keys() - self.fields.keys()
            if extra:
                raise TypeError(f"argument {path} has keys {self.tp.__name__} lacks: "
                                f"{', '.join(map(str, sorted(extra)))}")  # fmt: skip
            missing = self.required - value.keys()
            if missing:
                raise TypeError(f"argument {path} lacks keys: {', '.join(sorted(missing))}")
            items = dict(value)
        else:
            if type(value) is not self.tp:
                raise _wrong(value, self.tp, path)
            items = {name: getattr(value, name) for name in self.fields}
        return {name: _encode(self.fields[name], item, f"{path}.{name}")
                for name, item in items.items()}  # fmt: skip

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _mismatch(path, f"expected an object for {_name(self.tp)}, got {value!r:.80}")
        extra = value.keys() - self.fields.keys()
        if extra:
            field = sorted(extra)[0]
            raise _mismatch(f"{path}.{field}", f"{_name(self.tp)} has no such field now")
        missing = self.required - value.keys()
        if missing:
            field = sorted(missing)[0]
            raise _mismatch(f"{path}.{field}", f"missing, and {_name(self.tp)} requires it")
        items = {name: _decode(self.fields[name], item, f"{path}.{name}")
                 for name, item in value.items()}  # fmt: skip
        if self.is_dict:
            return items
        try:
            return self.tp(**items)
        except (TypeError, ValueError) as exc:  # its own checks (__post_init__)
            raise _mismatch(path, f"{_name(self.tp)}: {exc}") from None


@dataclasses.dataclass(frozen=True)
class PydanticCodec(Codec):
    tp: Any

    def encode(self, value: Any, path: str) -> Any:
        if not isinstance(value, self.tp):
            value = self._validate(value, path, TypeError)
        return value.model_dump(mode="json")

    def decode(self, value: Any, path: str) -> Any:
        return self._validate(value, path, PayloadMismatch)

    def _validate(self, value: Any, path: str, error: type[TypeError]) -> Any:
        try:
            return self.tp.model_validate(value)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            errors = getattr(exc, "errors", None)
            first = errors()[0] if callable(errors) else {}
            where = ".".join(str(p) for p in first.get("loc", ()))
            field = f"{path}.{where}" if where else path
            raise error(f"field {field}: {first.get('msg', exc)}") from None


@dataclasses.dataclass(frozen=True)
class OptionalCodec(Codec):
    inner: Codec

    def encode(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.encode(value, path)

    def decode(self, value: Any, path: str) -> Any:
        return None if value is None else self.inner.decode(value, path)


@dataclasses.dataclass(frozen=True)
class ListCodec(Codec):
    item: Codec

    def encode(self, value: Any, path: str) -> Any:
        if not isinstance(value, (list, tuple)):
            raise _wrong(value, list, path)
        return [self.item.encode(v, f"{path}[{i}]") for i, v in enumerate(value)]

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, list):
            raise _mismatch(path, f"expected a list, got {value!r:.80}")
        return [self.item.decode(v, f"{path}[{i}]") for i, v in enumerate(value)]


@dataclasses.dataclass(frozen=True)
class DictCodec(Codec):
    item: Codec

    def encode(self, value: Any, path: str) -> Any:
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            raise TypeError(f"argument {path} must be a dict with str keys")
        return {k: self.item.encode(v, f"{path}[{k!r}]") for k, v in value.items()}

    def decode(self, value: Any, path: str) -> Any:
        if not isinstance(value, dict):
            raise _mismatch(path, f"expected an object, got {value!r:.80}")
        return {k: self.item.decode(v, f"{path}[{k!r}]") for k, v in value.items()}


def _encode(codec: Codec | None, value: Any, path: str) -> Any:
    return value if codec is None else codec.encode(value, path)


def _decode(codec: Codec | None, value: Any, path: str) -> Any:
    return value if codec is None else codec.decode(value, path)


def _is_pydantic(tp: Any) -> bool:
    return (
        isinstance(tp, type)
        and callable(getattr(tp, "model_validate", None))
        and callable(getattr(tp, "model_dump", None))
    )


def codec_for(tp: Any) -> Codec | None:
    """The codec of an annotation; None when it needs none (JSON as it is)."""
    origin = get_origin(tp)
    if origin is typing.Annotated:
        return codec_for(get_args(tp)[0])
    if origin is Union or origin is types.UnionType:
        rest = [a for a in get_args(tp) if a is not type(None)]
        if len(rest) == 1 and len(get_args(tp)) == 2:
            inner = codec_for(rest[0])
            return None if inner is None else OptionalCodec(inner)
        return None
    if origin in (list, tuple) and origin is not None:
        args = get_args(tp)
        item = codec_for(args[0]) if args and (origin is list or args[-1] is Ellipsis) else None
        return None if item is None else ListCodec(item)
    if origin is dict:
        args = get_args(tp)
        item = codec_for(args[1]) if len(args) == 2 and args[0] is str else None
        return None if item is None else DictCodec(item)
    if not isinstance(tp, type):
        return None
    if issubclass(tp, enum.Enum):
        return EnumCodec(tp)
    if tp in (datetime, date, Decimal, uuid.UUID):
        return TextCodec(tp)
    if _is_pydantic(tp):
        return PydanticCodec(tp)
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        fields = {f.name: codec_for(hints.get(f.name)) for f in dataclasses.fields(tp) if f.init}
        required = frozenset(
            f.name for f in dataclasses.fields(tp)
            if f.init and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        )  # fmt: skip
        return FieldsCodec(tp, fields, required, is_dict=False)
    if is_typeddict(tp):
        return typeddict_codec(tp)
    return None


def typeddict_codec(tp: Any) -> FieldsCodec:
    """A ``TypedDict``'s codec. Its required keys are read from the resolved
    hints: under ``from __future__ import annotations`` the class itself
    cannot see a ``NotRequired[...]`` written as text."""
    hints = typing.get_type_hints(tp, include_extras=True)
    required = set(getattr(tp, "__required_keys__", ()))
    fields = {}
    for name, hint in hints.items():
        origin = get_origin(hint)
        if origin is typing.NotRequired:
            required.discard(name)
            hint = get_args(hint)[0]
        elif origin is typing.Required:
            required.add(name)
            hint = get_args(hint)[0]
        fields[name] = codec_for(hint)
    return FieldsCodec(tp, fields, frozenset(required), is_dict=True)


@dataclasses.dataclass(frozen=True)
class SignatureCodecs:
    """The codecs of a task's parameters that have one, by name."""

    signature: inspect.Signature
    by_name: Mapping[str, Codec]

    def _codec(self, position: int | None, name: str | None) -> tuple[str, Codec | None]:
        """The parameter an argument binds to (by position, or keyword) and its codec."""
        params = list(self.signature.parameters.values())
        if position is not None:
            for i, p in enumerate(params):
                if p.kind is p.VAR_POSITIONAL:
                    return f"{p.name}[{position - i}]", self.by_name.get(p.name)
                if i == position and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                    return p.name, self.by_name.get(p.name)
            return f"#{position}", None
        assert name is not None
        named = self.signature.parameters.get(name)
        if named is not None and named.kind in (named.POSITIONAL_OR_KEYWORD, named.KEYWORD_ONLY):
            return name, self.by_name.get(name)
        for p in params:
            if p.kind is p.VAR_KEYWORD:
                return name, self.by_name.get(p.name)
        return name, None

    def encode(
        self, args: tuple[Any, ...] | list[Any], kwargs: Mapping[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """The call's arguments encoded, positions and keywords kept as given."""
        return self._convert(args, kwargs, _encode)

    def decode(
        self, args: list[Any], kwargs: Mapping[str, Any]
    ) -> tuple[list[Any], dict[str, Any]]:
        """A job's stored arguments decoded; `PayloadMismatch` naming the field."""
        return self._convert(args, kwargs, _decode)

    def _convert(
        self,
        args: tuple[Any, ...] | list[Any],
        kwargs: Mapping[str, Any],
        convert: Callable[[Codec | None, Any, str], Any],
    ) -> tuple[list[Any], dict[str, Any]]:
        out_args = []
        for i, value in enumerate(args):
            path, codec = self._codec(i, None)
            out_args.append(convert(codec, value, path))
        out_kwargs = {}
        for key, value in kwargs.items():
            path, codec = self._codec(None, key)
            out_kwargs[key] = convert(codec, value, path)
        return out_args, out_kwargs


def signature_codecs(
    fn: Callable[..., Any], signature: inspect.Signature
) -> SignatureCodecs | None:
    """The codecs of ``fn``'s typed parameters; None when none has one (or its
    annotations cannot be resolved: then its arguments are JSON as given)."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # a name an annotation uses is not importable here
        return None
    by_name = {}
    for name in signature.parameters:
        codec = codec_for(hints.get(name)) if name in hints else None
        if codec is not None:
            by_name[name] = codec
    return SignatureCodecs(signature, by_name) if by_name else None
