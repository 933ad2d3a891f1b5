"""The demo's jobs: the app's jobs.py, imported at start-up (web and workers) so that @job
registers them; only registered jobs run."""

from __future__ import annotations

import time

from django_ratequeue import Retry, get_handle, job


@job
def fast(number: int) -> int:
    """A fifth of a second of work."""
    time.sleep(0.2)
    return number * number


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
