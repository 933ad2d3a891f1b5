"""Calls a type checker must refuse: test_mypy.py expects, on each line whose comment
starts with "E:", an error whose message contains the rest of the comment, and no other
error."""

from __future__ import annotations

from django_ratequeue import enqueue, job
from django_ratequeue.conf import ratequeue_settings


@job
def add(a: int, b: int) -> int:
    return a + b


def wrong_arguments() -> None:
    add.enqueue("1", 2)  # E: Argument 1 to "enqueue" of "JobFunction" has incompatible type "str"
    add.enqueue(1)  # E: Missing positional argument "b" in call to "enqueue"
    add.enqueue(1, 2, queue="q")  # E: Unexpected keyword argument "queue" for "enqueue"
    add.using(queue=3)  # E: Argument "queue" to "using" of "JobFunction" has incompatible type
    add.using(retires=3)  # E: Unexpected keyword argument "retires" for "using"
    add.using(unique_key=3)  # E: Argument "unique_key" to "using" of "JobFunction"
    enqueue(add, 1, 2)  # E: No overload variant of "enqueue" matches argument types


@job
async def count_words(text: str) -> int:
    return len(text.split())


async def wrong_async_calls() -> str:
    count_words.enqueue(3)  # E: Argument 1 to "enqueue" of "JobFunction" has incompatible
    await count_words.aenqueue()  # E: Missing positional argument "text" in call to "aenqueue"
    return await count_words.enqueue("a").aresult()  # E: Incompatible return value type (got "int"


def wrong_result() -> str:
    return add.enqueue(1, 2).result()  # E: Incompatible return value type (got "int", expected


def settings_read_as_a_dict() -> object:
    return ratequeue_settings()["MAX_CONCURRENCY"]  # E: Value of type "RateQueueSettings" is not
