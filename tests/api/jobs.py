"""Jobs the HTTP API's tests enqueue over HTTP (registered at start-up through
RATEQUEUE["JOB_MODULES"] in the test settings, in the tests and their qcluster workers)."""

from __future__ import annotations

import time
from typing import Any

from django_ratequeue import job, rate_limit, report_progress, stream_output
from django_ratequeue.api.permissions import request_owner


@job(expose=True)
def greet(name: str, punctuation: str = "!") -> str:
    return f"Hello, {name}{punctuation}"


@job(expose=True)
def answer(prompt: str, pause: float = 0.0) -> str:
    """A model that answers word by word: each word streamed, with progress."""
    words = [f"{word} " for word in prompt.split()]
    for done, word in enumerate(words, 1):
        stream_output(word)
        report_progress({"done": done, "total": len(words)})
        if pause:
            time.sleep(pause)
    return "".join(words).strip()


@job(expose=True, permission=lambda request: request.user.is_staff)
def staff_only() -> str:
    return "for staff"


def per_user(request: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The server's options: one job at a time per user, costing a token per character."""
    return {"concurrency_key": f"user:{request.user.pk}", "cost": len(kwargs["prompt"])}


def per_owner(request: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The server's options: each owner's jobs wait in a copy of the queue of their own."""
    return {"concurrency_key": request_owner(request, create=False)}


@job(expose=True, http_options=per_owner)
def greet_in_turn(name: str) -> str:
    return f"Hello, {name}."


@job(expose=True, queue="metered", http_options=per_user)
def metered(prompt: str) -> int:
    return len(prompt)


@job
def not_exposed() -> None:
    """Registered, so it runs when the code enqueues it, but not over HTTP."""


@job(expose=True, unique_for=600)
def summarize(text: str) -> int:
    """Summarised at most once per ten minutes per user and text (docs/deduplication.md)."""
    return len(text)


def charge_the_asker(request: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The server's options: each call spends 40 tokens of the asker's own budget."""
    rate_limit("asker_budget", key=f"user:{request.user.pk}", count=40, throws=True)
    return {}


@job(expose=True, http_options=charge_the_asker)
def charged(prompt: str) -> int:
    return len(prompt)
