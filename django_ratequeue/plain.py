"""The wall between job code and the engine: what a job hands back, made plain data.

A job's result, its exception, its progress and its output are objects the job made: any
of their methods may raise anything, ``BaseException`` included. The functions here turn
them into ``str`` and JSON text without ever letting what they raise out: each returns
plain data or raises a ValueError whose message is plain too. They run in the slot
that ran the job, so the runner and the protocol only ever handle plain data
(docs/concepts.md, "The wall"). This module is the standard library only: the remote
worker program (``worker.py``) uses it too, copied beside it.
"""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def guarded(make: Callable[[], T], fallback: Callable[[BaseException], T]) -> T:
    """Return ``make()``, or ``fallback(raised)`` when it raises anything at all."""
    try:
        return make()
    except BaseException as raised:  # the value's own code: anything may come out
        return fallback(raised)


def text(value: Any) -> str:
    """Return a ``str`` (a plain copy of a subclass) as a ``str``, anything else as ''."""
    return str.__str__(value) if isinstance(value, str) else ""


def class_name(value: object, unnamed: str = "an exception") -> str:
    """Return the name of ``value``'s class, however hostile the class; else ``unnamed``."""
    return guarded(lambda: text(type(value).__name__) or unnamed, lambda _: unnamed)


def class_path(error: BaseException) -> str:
    """Return the dotted path of ``error``'s class (``builtins.ValueError``), or ''."""

    def path() -> str:
        cls = type(error)
        return f"{text(cls.__module__)}.{text(cls.__qualname__)}"

    return guarded(path, lambda _: "")


def message(error: BaseException) -> str:
    """Return ``str(error)``, or '' when that raises or gives no ``str``."""
    return guarded(lambda: text(str(error)), lambda _: "")


def describe(error: BaseException) -> str:
    """Return ``Type: message`` of an exception; the type alone if its message raises."""
    name, said = class_name(error), message(error)
    return f"{name}: {said}" if said else name


def traceback_text(error: BaseException) -> str:
    """Return the traceback of ``error`` as Python prints it, or as much of it as can be had.

    When formatting the exception raises, the frames alone are given."""

    def whole() -> str:
        return text("".join(traceback.format_exception(error)))

    def frames(raised: BaseException) -> str:
        lines = guarded(lambda: traceback.format_tb(error.__traceback__), lambda _: [])
        shown = "".join(line for line in lines if isinstance(line, str))
        return f"Traceback (most recent call last):\n{shown}{describe(error)}\n"

    return guarded(whole, frames)


def raised_in(error: BaseException) -> str:
    """Return the name of the function ``error`` was raised in (``items``), or ''."""

    def innermost() -> str:
        tb = error.__traceback__
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        return text(tb.tb_frame.f_code.co_name) if tb is not None else ""

    return guarded(innermost, lambda _: "")


def clip(text: str, limit: int) -> str:
    """Return ``text`` as a database stores it, in at most ``limit`` bytes of UTF-8.

    Its beginning and its end (where a traceback names the error) are kept around a note
    of what was cut. A NUL is written ``\\x00``, and characters UTF-8 cannot encode (lone
    surrogates) are replaced: an error message or a traceback is always stored, never
    refused."""
    data = text.replace("\x00", "\\x00").encode("utf-8", "replace")
    if len(data) <= limit:
        return data.decode()
    note = f"\n[... {len(data) - limit} bytes cut ...]\n".encode()
    keep = max(limit - len(note), 0)
    head, tail = data[: keep - keep // 2], data[len(data) - keep // 2 :]
    return (head + note + tail).decode("utf-8", "ignore")


def json_text(what: str, value: Any) -> str:
    """Return ``value`` as JSON text (finite numbers), or raise a ValueError saying why.

    ``what`` names the value in the message (``The job's return value``)."""
    try:
        return json.dumps(value, allow_nan=False)
    except RecursionError:
        raise ValueError(f"{what} must not nest lists and objects this deep.") from None
    except BaseException as raised:  # TypeError, ValueError, or the value's own code
        raise ValueError(_refusal(what, raised)) from None


def _refusal(what: str, raised: BaseException) -> str:
    """Return why ``what`` could not be made JSON, ``raised`` being what making it raised."""
    if type(raised) in (TypeError, ValueError, OverflowError):
        return (
            f"{what} must be JSON-serialisable ({message(raised)}); pass plain data such as "
            "ids, strings, numbers, lists and dicts."
        )
    where = raised_in(raised)
    method = f"its {where}()" if where and where != "<lambda>" else "its own code"
    return f"{what} could not be made JSON: {method} raised {describe(raised)}."
