"""The example project's "Ask the model" page in a real browser, against a live server and
a real cluster: a user logs in, sees their budget, asks, watches the progress bar and the
answer streaming in word by word, and gets the whole answer; with EventSource or without
(the client then polls)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import User

from django_ratequeue.models import Job
from example_project.demo.accounts import create_demo_accounts
from example_project.demo.jobs import made_up_answer
from tests.browser.pages import budget, log_in, question, shows

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

PROMPT = "Why do my users have to wait for their turn?"


@pytest.mark.parametrize("event_source", [True, False], ids=["streamed", "polled"])
def test_a_question_is_answered_word_by_word(
    live_server: Any, cluster: Any, browser: Callable[..., Chrome], event_source: bool
) -> None:
    cluster()
    create_demo_accounts()
    page = browser(event_source=event_source)
    log_in(page, live_server, "alice")
    before = budget(page)

    page.find_element("id", "prompt").send_keys(PROMPT)
    page.find_element("id", "ask").click()

    answer = made_up_answer(PROMPT)
    # The progress bar part of the way, with part of the answer (streamed, or polled).
    shows(page, lambda b: (q := question(b)) and 0 < q["done"] < q["total"] and q, "progress")
    partial = shows(
        page,
        lambda b: (q := question(b)) and q["answer"] and q["done"] < q["total"] and q,
        "a partial answer",
    )
    assert answer.startswith(partial["answer"]) and partial["answer"] != answer
    assert partial["busy"] == "true"
    done = shows(page, lambda b: (q := question(b)) and q["status"] == "complete" and q, "answer")
    assert done["answer"] == answer
    assert done["done"] == done["total"] == len(answer.split(" "))
    assert done["busy"] == "false" and done["statusText"] == "Answered."
    assert shows(page, lambda b: budget(b) < before, "the budget to show the question")
    alice = User.objects.get(username="alice")
    job = Job.objects.get(pk=done["id"])
    assert (job.owner, job.result) == (f"auth.user:{alice.pk}", answer)

    # Reloaded: the question is there still, with its answer.
    page.refresh()
    again = shows(page, lambda b: (q := question(b)) and q["status"] == "complete" and q, "again")
    assert (again["id"], again["answer"], again["statusText"]) == (done["id"], answer, "Answered.")


def test_a_question_canceled_while_it_waits_says_so(
    live_server: Any, cluster: Any, browser: Callable[..., Chrome]
) -> None:
    """The llm queue answers one question per user at a time: the second waits."""
    cluster()
    create_demo_accounts()
    page = browser()
    log_in(page, live_server, "alice")
    for prompt in ["The first?", "The second?"]:
        page.find_element("id", "prompt").send_keys(prompt)
        page.find_element("id", "ask").click()
        shows(page, lambda b, p=prompt: p in b.find_element("id", "questions").text, prompt)
    second = "#questions li:nth-child(2)"
    # While it waits, it says where it is in line (its estimate: docs/eta.md).
    place = shows(
        page,
        lambda b: b.execute_script(
            "return document.querySelector(arguments[0] + ' .eta').textContent;", second
        ),
        "the second question's place in line",
    )
    assert place.startswith(("Next in line", "1 ahead of you")), place
    page.find_element("css selector", f"{second} .cancel").click()
    status = shows(
        page,
        lambda b: b.execute_script(
            "const item = document.querySelector(arguments[0]);"
            "const text = item.querySelector('.status').textContent;"
            "return item.dataset.status === 'canceled' && text;",
            second,
        ),
        "the second question canceled",
    )
    assert status == "Canceled."
