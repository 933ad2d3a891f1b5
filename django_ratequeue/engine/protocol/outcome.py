"""The outcome of an attempt, as every worker reports it: one value, checked once."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from typing import Any

from django.db import DatabaseError, DataError, IntegrityError

from django_ratequeue import plain
from django_ratequeue.conf import ratequeue_settings
from django_ratequeue.engine.bounds import check_json_text, clip
from django_ratequeue.engine.models import Outcome
from django_ratequeue.exceptions import (
    AttemptTimedOut,
    NonRetryableError,
    RecursiveWaitDeadlock,
    UnknownJob,
    class_path,
)

# What the database answers to a value it cannot store.
REFUSED = (DataError, IntegrityError)


@dataclass(frozen=True)
class Report:
    """How an attempt ended, in values a database can store.

    Made by :meth:`returned`, :meth:`raised` or :meth:`failed`, which check and clip what
    it holds, so that a database can store it."""

    outcome: str
    result: Any = None
    error: str = ""
    traceback: str = ""
    exception_class_path: str = ""

    @classmethod
    def returned(cls, value: Any) -> Report:
        """Return the report of a call that returned ``value``, its result a plain copy.

        That is a failure that says why if a job may not return it (see
        :func:`result_text`)."""
        try:
            text = result_text(value)
        except ValueError as error:
            return cls.raised(error)
        return cls(Outcome.SUCCEEDED, result=json.loads(text))

    @classmethod
    def raised(cls, error: BaseException, timed_out: bool = False) -> Report:
        """Return the report of a call that raised ``error``, in words.

        Nothing ``error``'s own code raises gets out (:mod:`django_ratequeue.plain`)."""
        outcome, text = plain.guarded(
            lambda: _outcome_of(error, timed_out),
            lambda raised: (Outcome.FAILED, plain.describe(error)),
        )
        return cls._clipped(outcome, text, plain.traceback_text(error), plain.class_path(error))

    @classmethod
    def failed(
        cls, error: str, traceback: str = "", retryable: bool = True, timed_out: bool = False
    ) -> Report:
        """Return the report of a failure told in words (a remote worker's).

        It is retried by its job's policy unless not ``retryable``; ``timed_out``: it
        overran its timeout."""
        outcome = Outcome.FAILED if retryable else Outcome.NON_RETRYABLE
        return cls._clipped(Outcome.TIMED_OUT if timed_out else outcome, error, traceback, "")

    @classmethod
    def refused(cls, error: DatabaseError) -> Report:
        """Return the failure stored instead of a report the database refused.

        The refused report held a value that slipped past :mod:`..bounds`."""
        return cls._clipped(Outcome.FAILED, refusal(error), "", class_path(type(error)))

    @classmethod
    def _clipped(cls, outcome: str, error: str, traceback: str, path: str) -> Report:
        """Return a report of ``outcome`` with its texts clipped to MAX_ERROR_BYTES.

        Texts are stored whatever they hold (:func:`..bounds.clip`): the real error is
        kept."""
        limit = ratequeue_settings().MAX_ERROR_BYTES
        return cls(
            outcome,
            error=clip(error, limit),
            traceback=clip(traceback, limit),
            exception_class_path=clip(path, limit),
        )

    def fields(self) -> dict[str, Any]:
        """Return the attempt's columns this report sets."""
        return {
            "outcome": self.outcome,
            "result": self.result,
            "error": self.error,
            "traceback": self.traceback,
            "exception_class_path": self.exception_class_path,
        }

    def unchecked(self, **changes: Any) -> Report:
        """Return a copy with ``changes``, unchecked.

        A test passes it to see a refused value handled."""
        return replace(self, **changes)


def _outcome_of(error: BaseException, timed_out: bool) -> tuple[str, str]:
    """Return the outcome of an attempt whose call raised ``error``, and its error text."""
    described = plain.describe(error)
    if timed_out or isinstance(error, AttemptTimedOut):
        return Outcome.TIMED_OUT, plain.message(error)
    if isinstance(error, NonRetryableError | RecursiveWaitDeadlock | UnknownJob):
        return Outcome.NON_RETRYABLE, described
    if isinstance(error, Exception):
        return Outcome.FAILED, described
    if isinstance(error, asyncio.CancelledError):
        return Outcome.FAILED, f"{described} (the job's task was cancelled)"
    # SystemExit, KeyboardInterrupt: the job's own; it fails, the worker goes on.
    return Outcome.FAILED, f"{described} (a job cannot stop its worker: this attempt failed)"


def refusal(error: DatabaseError) -> str:
    """Return the error of an attempt whose outcome the database refused to store.

    The attempt fails with it instead."""
    lines = str(error).splitlines() or [type(error).__name__]
    # PostgreSQL's LINE and CONTEXT quote the statement, values and all: its DETAIL does not.
    reason = "; ".join([lines[0], *(line for line in lines[1:] if line.startswith("DETAIL:"))])
    return clip(
        f"The database refused this attempt's outcome, so it failed: {reason}",
        ratequeue_settings().MAX_ERROR_BYTES,
    )


def result_text(result: Any) -> str:
    """Return ``result`` as the JSON text to store, or raise a ValueError saying why not.

    Refused: what is not JSON or what :func:`..bounds.check_json_text` refuses, and
    more than MAX_RESULT_BYTES. The attempt fails rather than store it (and hand it to
    every reader and callback). Nothing the value's own code raises gets out."""
    subject = "The job's return value"
    text = check_json_text(subject, plain.json_text(subject, result))
    limit = ratequeue_settings().MAX_RESULT_BYTES
    if len(text) > limit:
        raise ValueError(
            f"The job's result is {len(text)} bytes of JSON; the most is "
            f'RATEQUEUE["MAX_RESULT_BYTES"] ({limit}). Store big output elsewhere (a file, '
            "a row) and return a reference to it."
        )
    return text


def check_result_size(result: Any) -> None:
    """Refuse a result a database cannot store, or one bigger than MAX_RESULT_BYTES."""
    result_text(result)
