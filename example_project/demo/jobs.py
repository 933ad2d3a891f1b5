"""The demo's jobs: the app's jobs.py, imported at start-up (web and workers) so that @job
registers them; only registered jobs run."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from django_ratequeue import (
    NonRetryableError,
    Retry,
    get_handle,
    job,
    rate_limit,
    report_progress,
    stream_output,
)
from django_ratequeue.api.permissions import request_owner
from django_ratequeue.decorators import user_key


@job
def fast(number: int) -> int:
    """A fifth of a second of work."""
    time.sleep(0.2)
    return number * number


@job
def batch_finished(outcome: dict[str, Any]) -> str:
    """The demo batch's on_complete: runs once, when every job of the batch has ended."""
    return f"{len(outcome['succeeded'])} of {outcome['total']} jobs of the batch succeeded"


@job
def slow(seconds: float) -> str:
    time.sleep(seconds)
    return f"slept {seconds:g} s"


@job(retries=Retry(retry_count=3, initial_interval=1, randomize_interval=False))
def flaky(job_id: str) -> str:
    """Fail the first two attempts, succeed on the third (after 1 s, then 2 s of back-off).

    The job is given its own id so that it can count its attempts through its handle.
    """
    attempt = len(get_handle(job_id).attempts())
    if attempt <= 2:
        raise ConnectionError(f"the upstream service did not answer (attempt {attempt})")
    return f"succeeded on attempt {attempt}"


@job(retries=Retry(retry_count=2, initial_interval=1, randomize_interval=False))
def broken(name: str) -> None:
    """Always fails: three attempts, then FAILED with the last traceback."""
    raise ValueError(f"{name} cannot be processed")


@job(queue="emails")
def send_email(to: str) -> str:
    """Pretend to talk to a mail server; the "emails" queue runs two at a time."""
    time.sleep(1)
    return f"sent to {to}"


@job(queue="llm")
def summarize(user: str, document: int) -> str:
    """Pretend to call an LLM: enqueued with ``concurrency_key=user`` and ``cost`` = the
    tokens it will spend, so users take turns and the token budget is never exceeded."""
    time.sleep(0.5)
    return f"summary of document {document} for {user}"


# What a question on the "Ask the model" page costs, in tokens of the asker's budget and
# of the model's (the limits in settings.RATEQUEUE).
ASK_COST = 40
USER_BUDGET = "llm_user_tokens"
MODEL_BUDGET = "llm_tokens"
PROMPT_MAX_LENGTH = 500
SECONDS_PER_WORD = 0.08


def made_up_answer(prompt: str) -> str:
    """The fake model's answer: the same for the same prompt, about forty words."""
    return (
        f"You asked “{prompt.strip()}”. A real model would call a provider here, with the "
        "tokens this queue reserved for it. This one makes up its answer and sends it one "
        "word at a time, reporting its progress as it goes, so that the page can show the "
        "words arriving."
    )


def charge_the_asker(request: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    """The server's options for a question asked over HTTP: it costs the asker ASK_COST
    tokens of their own budget (spent: 429 with Retry-After), and it waits for the asker's
    previous question (their own concurrency key: the job's owner, so that the page may
    show its position, docs/eta.md), not for other users'."""
    rate_limit(USER_BUDGET, key=user_key(request), count=ASK_COST, throws=True)
    return {"concurrency_key": request_owner(request, create=False)}


@job(queue="llm", cost=ASK_COST, retries=0, expose=True, http_options=charge_the_asker)
async def ask_model(prompt: str) -> str:
    """A stand-in for an LLM call, enqueued from the browser (``expose=True``): an ``async
    def`` job, as with an LLM client library's async API, run on its worker's event loop
    beside the others. It streams its answer word by word with ``stream_output`` and says
    how far it is with ``report_progress``; the result is the whole answer. The queue
    starts it when the model's token budget has its ``cost`` (``llm_tokens``, shared by
    all users)."""
    if not isinstance(prompt, str) or not prompt.strip():
        raise NonRetryableError("Ask a question: the prompt is empty.")
    if len(prompt) > PROMPT_MAX_LENGTH:
        raise NonRetryableError(f"Ask a shorter question: at most {PROMPT_MAX_LENGTH} characters.")
    words = made_up_answer(prompt).split(" ")
    for done, word in enumerate(words, 1):
        await asyncio.sleep(SECONDS_PER_WORD)
        stream_output(word if done == 1 else f" {word}")
        report_progress({"done": done, "total": len(words)})
    return " ".join(words)


@job(queue="remote")
def on_remote_worker(number: int) -> str:
    """Runs on the demo's remote worker (example_project/remote_handlers.py, which
    scripts/demo.sh starts): the queue is remote, so this body never runs here."""
    raise NonRetryableError("The 'remote' queue runs on remote workers only.")
