"""A catalogue of hostile things a job can hand back: results, exceptions, progress, output.

Standard library only: local jobs (tests/queue/hostile_jobs.py) and a remote worker's
handlers (tests/remote/handlers.py) run the same kinds. Each kind is a function of the
``api`` the job reports through (``report_progress`` and ``stream_output``), and
:data:`EXPECTED` says how its attempt must end: ``("complete", result)`` where the value
is stored as plain data, else ``("failed", words the error holds)``.
"""

from __future__ import annotations

import asyncio
import datetime
import decimal
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any


class Boom(RuntimeError):
    """What the hostile methods raise."""


def boom(*args: Any, **kwargs: Any) -> Any:
    raise Boom("hostile")


def exit_now(*args: Any, **kwargs: Any) -> Any:
    raise SystemExit("hostile exit")


class ItemsRaise(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise Boom("hostile")


class ItemsExit(dict):  # type: ignore[type-arg]
    def items(self) -> Any:
        raise SystemExit("hostile exit")


class IterRaise(list):  # type: ignore[type-arg]
    __iter__ = boom
    __len__ = boom


class HashRaise(dict):  # type: ignore[type-arg]
    __eq__ = boom
    __hash__ = boom  # type: ignore[assignment]


class StrRaise(str):
    __str__ = boom
    __repr__ = boom
    encode = boom  # type: ignore[assignment]


class ReprRaise:
    __repr__ = boom
    __str__ = boom


class StrRaisesError(Exception):
    __str__ = boom
    __repr__ = boom


class StrExitsError(Exception):
    __str__ = exit_now


class CauseRaisesError(Exception):
    @property
    def __cause__(self) -> Any:  # type: ignore[override]
        raise Boom("hostile cause")


class ClassRaisesError(Exception):
    @property
    def __class__(self) -> Any:  # type: ignore[override]
        raise Boom("hostile class")


class HostileMeta(type):
    def __getattribute__(cls, name: str) -> Any:
        if name in ("__name__", "__qualname__", "__module__"):
            raise Boom("hostile metaclass")
        return super().__getattribute__(name)


class MetaRaisesError(Exception, metaclass=HostileMeta):
    pass


def recursive_list() -> list[Any]:
    value: list[Any] = []
    value.append(value)
    return value


def recursive_dict() -> dict[str, Any]:
    value: dict[str, Any] = {}
    value["self"] = value
    return value


def deep_list(depth: int) -> list[Any]:
    value: list[Any] = []
    for _ in range(depth):
        value = [value]
    return value


def cyclic_cause() -> BaseException:
    first, second = ValueError("first"), ValueError("second")
    first.__cause__, second.__cause__ = second, first
    return first


def cyclic_context() -> BaseException:
    first, second = ValueError("first"), ValueError("second")
    first.__context__, second.__context__ = second, first
    return first


def finally_raises(api: Any) -> Any:
    try:
        return "never returned"
    finally:
        raise ValueError("raised in finally")


def generator() -> Any:
    yield 1


def returns(value: Callable[[], Any]) -> Callable[[Any], Any]:
    return lambda api: value()


def raises(error: Callable[[], BaseException]) -> Callable[[Any], Any]:
    def kind(api: Any) -> Any:
        raise error()

    return kind


KINDS: dict[str, Callable[[Any], Any]] = {
    # Results
    "items raises": returns(lambda: ItemsRaise(a=1)),
    "items exits": returns(lambda: ItemsExit(a=1)),
    "iter and len raise": returns(lambda: IterRaise([1, 2])),
    "eq and hash raise": returns(lambda: HashRaise(a=1)),
    "str subclass": returns(lambda: StrRaise("plain")),
    "repr raises": returns(ReprRaise),
    "huge int": returns(lambda: 10**5000),
    "recursive list": returns(recursive_list),
    "recursive dict": returns(recursive_dict),
    "deep list": returns(lambda: deep_list(100_000)),
    "nan": returns(lambda: float("nan")),
    "inf": returns(lambda: float("inf")),
    "bytes": returns(lambda: b"bytes"),
    "decimal": returns(lambda: decimal.Decimal("1.5")),
    "datetime": returns(lambda: datetime.datetime(9999, 12, 31)),
    "generator": returns(generator),
    "set": returns(lambda: {1, 2}),
    "nul": returns(lambda: "a\x00b"),
    "surrogate": returns(lambda: "caf\udce9"),
    "ten megabytes": returns(lambda: "x" * 10_000_000),
    # Exceptions
    "error str raises": raises(StrRaisesError),
    "error str exits": raises(StrExitsError),
    "error args hostile": raises(lambda: ValueError(ReprRaise())),
    "cyclic cause": raises(cyclic_cause),
    "cyclic context": raises(cyclic_context),
    "cause property raises": raises(CauseRaisesError),
    "class property raises": raises(ClassRaisesError),
    "metaclass raises": raises(MetaRaisesError),
    "huge message": raises(lambda: ValueError("m" * 10_000_000)),
    "system exit": raises(lambda: SystemExit(3)),
    "keyboard interrupt": raises(KeyboardInterrupt),
    "generator exit": raises(GeneratorExit),
    "cancelled": raises(asyncio.CancelledError),
    "finally raises": finally_raises,
    # Progress and output
    "progress items raises": lambda api: api.report_progress(ItemsRaise(a=1)),
    "progress nan": lambda api: api.report_progress({"done": float("nan")}),
    "progress not a dict": lambda api: api.report_progress(ReprRaise()),
    "output str subclass": lambda api: api.stream_output(StrRaise("streamed")) or "streamed",
    "output not a str": lambda api: api.stream_output(ReprRaise()),
}

NOT_JSON = "must be JSON-serialisable"
EXPECTED: dict[str, tuple[str, Any]] = {
    "items raises": ("failed", "its items() raised Boom: hostile"),
    "items exits": ("failed", "its items() raised SystemExit: hostile exit"),
    "iter and len raise": ("failed", "raised Boom: hostile"),
    "eq and hash raise": ("complete", {"a": 1}),
    "str subclass": ("complete", "plain"),
    "repr raises": ("failed", NOT_JSON),
    "huge int": ("failed", NOT_JSON),
    "recursive list": ("failed", NOT_JSON),
    "recursive dict": ("failed", NOT_JSON),
    "deep list": ("failed", "must not nest lists and objects"),
    "nan": ("failed", NOT_JSON),
    "inf": ("failed", NOT_JSON),
    "bytes": ("failed", NOT_JSON),
    "decimal": ("failed", NOT_JSON),
    "datetime": ("failed", NOT_JSON),
    "generator": ("failed", NOT_JSON),
    "set": ("failed", NOT_JSON),
    "nul": ("failed", "must not contain NUL"),
    "surrogate": ("failed", "lone surrogate"),
    "ten megabytes": ("failed", "MAX_RESULT_BYTES"),
    "error str raises": ("failed", "StrRaisesError"),
    "error str exits": ("failed", "StrExitsError"),
    "error args hostile": ("failed", "ValueError"),
    "cyclic cause": ("failed", "ValueError: first"),
    "cyclic context": ("failed", "ValueError: first"),
    "cause property raises": ("failed", "CauseRaisesError"),
    "class property raises": ("failed", "ClassRaisesError"),
    "metaclass raises": ("failed", "an exception"),
    "huge message": ("failed", "ValueError: mmmm"),
    "system exit": ("failed", "SystemExit: 3"),
    "keyboard interrupt": ("failed", "KeyboardInterrupt"),
    "generator exit": ("failed", "GeneratorExit"),
    "cancelled": ("failed", "CancelledError"),
    "finally raises": ("failed", "ValueError: raised in finally"),
    "progress items raises": ("failed", "its items() raised Boom: hostile"),
    "progress nan": ("failed", NOT_JSON),
    "progress not a dict": ("failed", "takes a dict"),
    "output str subclass": ("complete", "streamed"),
    "output not a str": ("failed", "takes a str"),
}

# How the kinds that stream output leave it, as Handle.output() gives it.
OUTPUT = {"output str subclass": ["streamed"]}


def run(kind: str, api: Any) -> Any:
    """Run the hostile ``kind``, reporting through ``api``."""
    return KINDS[kind](api)


def api_of(report_progress: Callable[[Any], Any], stream_output: Callable[[Any], Any]) -> Any:
    """Return the ``api`` the kinds report through."""
    return SimpleNamespace(report_progress=report_progress, stream_output=stream_output)
