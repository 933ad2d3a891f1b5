"""One base exception, every exception in exceptions.py, and JobDoesNotExist."""

from __future__ import annotations

import importlib
import pickle
import pkgutil

import pytest
from django.core.exceptions import ObjectDoesNotExist
from rest_framework.exceptions import APIException

import django_ratequeue
from django_ratequeue import (
    DuplicateJobId,
    JobDoesNotExist,
    RateQueueError,
    UnknownJob,
    enqueue,
    get_handle,
)
from django_ratequeue.engine.handles import Handle, missing_job
from django_ratequeue.models import Attempt, Job
from tests.queue import jobs


def package_modules() -> list[str]:
    """Every module of the package but its migrations, imported."""
    names = [
        info.name
        for info in pkgutil.walk_packages(django_ratequeue.__path__, "django_ratequeue.")
        if ".migrations" not in info.name
    ]
    for name in names:
        importlib.import_module(name)
    return names


def test_every_exception_lives_in_exceptions_py_and_derives_from_the_base() -> None:
    """But the HTTP API's answers: DRF's APIException subclasses that views raise to send
    a status code (413, 409), never raised by the library to its callers; and those of
    the remote worker program and its pool, which run without Django (exceptions.py
    needs it)."""
    defined = {
        value
        for name in package_modules()
        for value in vars(importlib.import_module(name)).values()
        if isinstance(value, type)
        and issubclass(value, BaseException)
        and not issubclass(value, APIException)
        and value.__module__.startswith("django_ratequeue")
        and value.__module__
        not in ("django_ratequeue.worker.client", "django_ratequeue.engine.pool")
    }
    assert len(defined) > 10
    assert {cls.__module__ for cls in defined} == {"django_ratequeue.exceptions"}
    assert all(issubclass(cls, RateQueueError) for cls in defined)


def test_documented_kinds_are_kept() -> None:
    assert issubclass(DuplicateJobId, ValueError)
    assert issubclass(UnknownJob, ValueError)
    assert issubclass(JobDoesNotExist, ObjectDoesNotExist)
    assert {"RateQueueError", "JobDoesNotExist"} <= set(django_ratequeue.__all__)


@pytest.mark.django_db
def test_a_missing_job_raises_job_does_not_exist_which_old_code_still_catches() -> None:
    with pytest.raises(JobDoesNotExist) as seen:
        get_handle("missing")
    assert str(seen.value) == missing_job("missing")
    with pytest.raises(Job.DoesNotExist):  # as before
        get_handle("missing")
    with pytest.raises(RateQueueError):
        Handle("missing").status()
    # The ORM raises the same class, and so does the attempt's link to its job.
    with pytest.raises(JobDoesNotExist):
        Job.objects.get(pk="missing")
    with pytest.raises(JobDoesNotExist):
        Attempt().job  # noqa: B018
    assert pickle.loads(pickle.dumps(JobDoesNotExist("x"))).args == ("x",)


@pytest.mark.django_db
def test_another_owners_job_raises_job_does_not_exist_with_the_same_message() -> None:
    mine = enqueue(jobs.add, args=[1, 2], owner="alice")
    with pytest.raises(JobDoesNotExist) as seen:
        get_handle(mine.id, owner="mallory")
    assert str(seen.value) == missing_job(mine.id)
    with pytest.raises(JobDoesNotExist) as seen:
        Handle(mine.id, owner="mallory").attempts()
    assert str(seen.value) == missing_job(mine.id)
