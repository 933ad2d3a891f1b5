"""What handler modules use: ``@handler`` registers a function by its job's name;
``stream_output``, ``report_progress`` and ``canceled`` report on the attempt running it."""

from __future__ import annotations

import contextvars
import importlib
import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if __package__ == "django_ratequeue.worker":  # in the installed package
    from django_ratequeue import plain
else:  # in the zipapp (manage.py ratequeue_worker_app), as the package ``worker``
    import plain  # type: ignore[no-redef]

if TYPE_CHECKING:
    from .attempt import RemoteAttempt

_handlers: dict[str, Callable[..., Any]] = {}


def handler(name: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the decorated function as the handler of jobs named ``name``."""

    def register(func: Callable[..., Any]) -> Callable[..., Any]:
        _handlers[name] = func
        return func

    return register


def load_handlers(names: list[str]) -> dict[str, Callable[..., Any]]:
    """Import the handler modules; the handlers they registered or list in HANDLERS."""
    found: dict[str, Callable[..., Any]] = {}
    for name in names:
        module = importlib.import_module(name)
        found.update(getattr(module, "HANDLERS", {}))
    found.update(_handlers)
    return found


current_attempt: contextvars.ContextVar[RemoteAttempt | None] = contextvars.ContextVar(
    "ratequeue_remote_attempt", default=None
)


def _running(call: str) -> RemoteAttempt:
    attempt = current_attempt.get()
    if attempt is None:
        raise RuntimeError(f"{call} reports on the job running it: call it from a handler.")
    return attempt


def stream_output(text: str) -> None:
    """Append ``text`` to the running job's output (sent within ``REPORT_INTERVAL``)."""
    if not isinstance(text, str):
        raise TypeError(f"stream_output() takes a str, not {plain.class_name(text, 'an object')}.")
    attempt = _running("stream_output()")
    with attempt.lock:
        attempt.texts.append(plain.text(text))


def report_progress(data: dict[str, Any]) -> None:
    """Record how far the running job is, as a JSON object (the latest one is sent)."""
    if not isinstance(data, dict):
        raise TypeError(
            f"report_progress() takes a dict, not {plain.class_name(data, 'an object')}."
        )
    text = plain.json_text("The job's progress", data)
    attempt = _running("report_progress()")
    with attempt.lock:
        attempt.progress, attempt.progress_sent = json.loads(text), False


def canceled() -> bool:
    """Whether the running job was canceled (its handler may stop early)."""
    return _running("canceled()").canceled.is_set()
