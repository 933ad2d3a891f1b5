"""A user's project as a type checker sees it: it calls the documented API, and each
``assert_type`` states the type a user gets. test_mypy.py checks it with ``mypy --strict``;
it is never imported."""

from __future__ import annotations

from collections.abc import Coroutine
from datetime import datetime, timedelta
from typing import Any, assert_type

from django.http import HttpRequest, HttpResponse
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from django_ratequeue import (
    AsyncJobFunction,
    BatchHandle,
    FixedWindow,
    Handle,
    HandleList,
    JobFunction,
    RateLimitResult,
    Retry,
    Status,
    TokenBucket,
    batch,
    check_rate_limit,
    define_rate_limits,
    enqueue,
    enqueue_many,
    get_batch,
    get_handle,
    get_rate_limit_value,
    job,
    rate_limit,
    report_progress,
    reset_rate_limit,
    stream_output,
)
from django_ratequeue.conf import RateQueueSettings, ratequeue_settings
from django_ratequeue.contrib.drf import RateLimitThrottle
from django_ratequeue.decorators import ratelimit
from django_ratequeue.ratelimit.defined import RateLimits


@job
def add(a: int, b: int) -> int:
    return a + b


@job(queue="emails", retries=3, timeout=30)
def send_email(to: str, *, subject: str = "") -> bool:
    return bool(to and subject)


@job(queue={"name": "llm", "max_concurrency": 4}, retries={"retry_count": 2})
def summarize(text: str) -> dict[str, int]:
    return {"words": len(text.split())}


def per_user(request: Any, args: list[Any], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"concurrency_key": f"user:{request.user.pk}", "cost": len(kwargs["prompt"])}


@job(queue="llm", expose=True, permission=lambda request: True, http_options=per_user)
def ask(prompt: str) -> str:
    for word in prompt.split():
        stream_output(word)
        report_progress({"words": 1})
    return prompt


async def answered(handle: Handle[str]) -> str:
    return await handle.aresult(timeout=30)


def takes_adder(adder: JobFunction[[int, int], int]) -> None:
    """A JobFunction is generic in the function's parameters and return type."""


def jobs() -> None:
    takes_adder(add)
    assert_type(add(1, 2), int)
    assert_type(add.enqueue(1, 2), Handle[int])
    assert_type(add.enqueue(1, b=2).result(), int)
    assert_type(add.enqueue(1, 2).result(timeout=5), int)
    assert_type(send_email.enqueue("a@example.com", subject="Hi"), Handle[bool])
    assert_type(summarize.enqueue("a b c").result()["words"], int)

    later = add.using(queue="math", priority=5, run_after=timedelta(minutes=1))
    takes_adder(later)
    assert_type(later.enqueue(2, 3), Handle[int])
    assert_type(
        add.using(start_at=datetime(2030, 1, 1), retries=Retry(retry_count=1), cost=2)
        .using(id="sum-1", on_duplicate_id="ignore", concurrency_key="user:1")
        .enqueue(1, 2),
        Handle[int],
    )

    assert_type(enqueue(add, args=[1, 2], retries=0), Handle[int])
    assert_type(
        add.using(unique_for=timedelta(minutes=5), unique_key="k").enqueue(1, 2), Handle[int]
    )
    assert_type(enqueue(add, args=[1, 2], debounce=2.5, unique_key="k"), Handle[int])
    assert_type(enqueue(add, kwargs={"a": 1, "b": 2}, queue="math"), Handle[int])
    assert_type(enqueue("myapp.jobs.add", args=(1, 2)), Handle[Any])
    assert_type(enqueue(add, args=[1, 2], on_complete=send_email, context={"n": 1}), Handle[int])
    assert_type(enqueue_many(add, [[1, 2], {"a": 3, "b": 4}], queue="math"), HandleList[int])
    assert_type(add.enqueue_many([(1, 2)], id="batch"), HandleList[int])
    many: list[Handle[int]] = add.enqueue_many([(1, 2)], batch={"on_complete": send_email})
    assert_type(many, list[Handle[int]])  # a HandleList is a list of handles
    assert_type(enqueue_many(add, [(1, 2)], batch=True).batch, BatchHandle | None)
    with batch(on_complete=send_email, context={"n": 1}) as group:
        assert_type(group, BatchHandle)
        add.enqueue(1, 2)
    assert_type(group.result(timeout=5), dict[str, Any])
    assert_type(group.status(), dict[Status, int])
    assert_type(get_batch(group.id, owner="alice").progress(), dict[str, int])

    handle = get_handle("sum-1")
    assert_type(handle, Handle[Any])
    assert_type(handle.status(), Status)
    handle.cancel()

    asked = ask.enqueue("Why?")
    assert_type(asked, Handle[str])
    assert_type(asked.progress(), dict[str, Any] | None)
    assert_type(asked.output(since=3), list[str])


@job
async def ask_model(prompt: str, *, temperature: float = 0.0) -> dict[str, str]:
    stream_output(prompt)
    return {"answer": prompt}


@job(queue="llm", retries=2)
async def count_words(text: str) -> int:
    return len(text.split())


def takes_async_counter(counter: AsyncJobFunction[[str], int]) -> None:
    """An AsyncJobFunction is generic in the parameters and the awaited result."""


async def async_jobs(view_handle: Handle[int]) -> None:
    takes_async_counter(count_words)
    takes_async_counter(count_words.using(priority=3))
    # Called, it is the coroutine function it decorates; its handles give the awaited result.
    called = assert_type(ask_model("hi"), Coroutine[Any, Any, dict[str, str]])
    assert_type(await called, dict[str, str])
    assert_type(ask_model.enqueue("hi", temperature=0.5), Handle[dict[str, str]])
    assert_type(ask_model.enqueue("hi").result(), dict[str, str])
    assert_type(await ask_model.enqueue("hi").aresult(timeout=5), dict[str, str])
    assert_type(await ask_model.aenqueue("hi"), Handle[dict[str, str]])
    assert_type(ask_model.using(queue="llm").enqueue("x"), Handle[dict[str, str]])
    assert_type(count_words.enqueue_many(["a b", "c"]), HandleList[int])
    assert_type(enqueue(count_words, args=["a b"]), Handle[int])
    assert_type(enqueue_many(count_words, ["a b"]), HandleList[int])
    # A sync job is enqueued from async code too.
    assert_type(await add.aenqueue(1, 2), Handle[int])
    assert_type(await view_handle.aresult(), int)


def rate_limits() -> None:
    bucket = TokenBucket(rate=10, period=timedelta(minutes=1), capacity=20)
    assert_type(bucket, TokenBucket)
    window = FixedWindow(rate=100, period=3600)
    result = rate_limit("llm", key="user:1", count=2, config=bucket)
    assert_type(result, RateLimitResult)
    assert_type(result.ok, bool)
    assert_type(result.retry_at, datetime | None)
    assert_type(result.retry_after, float | None)
    assert_type(check_rate_limit("llm", key="user:1", config=window).value, float | None)
    reset_rate_limit("llm", key="user:1")
    assert_type(get_rate_limit_value("llm"), float)

    login = {"kind": "fixed window", "rate": 5, "period": 60}
    limits = define_rate_limits({"signup": bucket, "login": login})
    assert_type(limits, RateLimits)
    assert_type(limits.rate_limit("signup", key="1.2.3.4"), RateLimitResult)
    assert_type(limits.check_rate_limit("login"), RateLimitResult)


@ratelimit("search", key="user_or_ip", count=1)
def search(request: HttpRequest) -> HttpResponse:
    return HttpResponse("ok")


@ratelimit("export", key=lambda request: request.headers.get("X-Team"))
def export(request: HttpRequest, team: str) -> HttpResponse:
    return HttpResponse(team)


def views() -> None:
    assert_type(search(HttpRequest()), HttpResponse)
    assert_type(export(HttpRequest(), "a"), HttpResponse)


class ReportsThrottle(RateLimitThrottle):
    scope = "reports"
    rate = "10/min"


class ReportsView(APIView):
    throttle_classes = [ReportsThrottle]

    def get(self, request: Request) -> Response:
        throttle = ReportsThrottle()
        assert_type(throttle.allow_request(request, self), bool)
        assert_type(throttle.wait(), float | None)
        return Response({})


def settings_read_as_attributes() -> None:
    settings = ratequeue_settings()
    assert_type(settings, RateQueueSettings)
    assert_type(settings.MAX_CONCURRENCY, int)
    assert_type(settings.RETENTION, float)
    assert_type(settings.ROLLUP_RETENTION, float)
    assert_type(settings.QUEUES["emails"].max_concurrency, int)
    assert_type(settings.QUEUES["emails"].rate_limit, str | None)
    assert_type(settings.DEFAULT_RETRIES, Retry)
    assert_type(settings.JOB_MODULES, tuple[str, ...])
