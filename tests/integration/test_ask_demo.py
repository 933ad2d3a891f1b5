"""The example project's "Ask the model" page without a browser: its accounts, its login,
what it hands ratequeue.js, and what asking over the HTTP API costs and decides
(tests/browser/ drives the page itself)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client, RequestFactory, override_settings

from django_ratequeue import get_rate_limit_value, rate_limit
from django_ratequeue.decorators import user_key
from django_ratequeue.engine.fairness.shares import KeyLimits
from django_ratequeue.models import Job
from example_project.demo.accounts import USERS
from example_project.demo.jobs import ASK_COST, MODEL_BUDGET, USER_BUDGET, ask_model

pytestmark = pytest.mark.django_db


@pytest.fixture
def alice(client: Client) -> Client:
    call_command("demo_accounts")
    client.login(username="alice", password=USERS["alice"])
    client.get("/ask/")  # the page sets the csrftoken cookie ratequeue.js sends back
    return client


def ask(client: Client, prompt: str) -> Any:
    return client.post(
        "/ratequeue/jobs/",
        {"function": ask_model.path, "args": [prompt]},
        content_type="application/json",
        headers={"X-CSRFToken": client.cookies["csrftoken"].value},
    )


def test_demo_accounts_are_created_once(capsys: pytest.CaptureFixture[str]) -> None:
    call_command("demo_accounts")
    User.objects.filter(username="bob").update(first_name="changed by hand")
    call_command("demo_accounts")

    assert capsys.readouterr().out.splitlines() == [
        "Created: admin, alice, bob.",
        "Accounts exist.",
    ]
    admin = User.objects.get(username="admin")
    assert admin.is_superuser and admin.check_password("admin")
    assert User.objects.get(username="alice").check_password(USERS["alice"])
    assert User.objects.get(username="bob").first_name == "changed by hand"


def test_the_page_asks_visitors_to_log_in_as_a_demo_user(client: Client) -> None:
    assert "/ask/" in client.get("/").content.decode()

    response = client.get("/ask/")

    assert response.status_code == 302
    assert response["Location"] == "/accounts/login/?next=/ask/"
    login = client.get(response["Location"]).content.decode()
    for username, password in USERS.items():
        assert f"user <code>{username}</code>, password <code>{password}</code>" in login


def test_logging_in_leads_to_the_page_which_loads_the_client(client: Client) -> None:
    call_command("demo_accounts")

    response = client.post(
        "/accounts/login/?next=/ask/",
        {"username": "bob", "password": USERS["bob"], "next": "/ask/"},
        follow=True,
    )

    page = response.content.decode()
    assert response.redirect_chain == [("/ask/", 302)]
    assert 'Signed in as <strong id="username">bob</strong>' in page
    assert 'from "/static/ratequeue/ratequeue.js"' in page
    assert finders.find("ratequeue/ratequeue.js")
    config = page.split('<script id="ratequeue-client" type="application/json">')[1]
    assert json.loads(config.split("</script>")[0]) == {
        "api": "/ratequeue/",
        "function": "example_project.demo.jobs.ask_model",
        "budgets": {"user": "llm_user_tokens", "model": "llm_tokens"},
        "cost": ASK_COST,
        "questions": [],
    }


def page_questions(client: Client) -> list[dict[str, str]]:
    page = client.get("/ask/").content.decode()
    config = page.split('<script id="ratequeue-client" type="application/json">')[1]
    questions: list[dict[str, str]] = json.loads(config.split("</script>")[0])["questions"]
    return questions


def test_the_page_lists_the_askers_questions_again_after_a_reload(alice: Client) -> None:
    first, second = (ask(alice, prompt).json()["id"] for prompt in ["One?", "<b>Two</b>?"])
    bob = Client()
    bob.login(username="bob", password=USERS["bob"])
    bob.get("/ask/")
    ask(bob, "Bob's?")

    assert page_questions(alice) == [
        {"id": first, "prompt": "One?", "status": "waiting"},
        {"id": second, "prompt": "<b>Two</b>?", "status": "waiting"},
    ]
    assert [q["prompt"] for q in page_questions(bob)] == ["Bob's?"]


def test_a_question_costs_the_asker_and_waits_for_their_own_turn(alice: Client) -> None:
    user = User.objects.get(username="alice")

    response = ask(alice, "Is it my turn?")

    assert response.status_code == 201, response.content
    job = Job.objects.get(pk=response.json()["id"])
    assert job.owner == f"auth.user:{user.pk}"
    assert job.concurrency_key == job.owner  # one question at a time per user
    assert (job.queue, job.cost) == ("llm", ASK_COST)
    spent = 200 - get_rate_limit_value(USER_BUDGET, key=f"user:{user.pk}")
    assert ASK_COST - 1 < spent <= ASK_COST  # it refills as time passes


def test_a_spent_budget_is_a_429_with_retry_after_and_nothing_enqueued(alice: Client) -> None:
    asked = [ask(alice, f"question {n}") for n in range(5)]

    refused = ask(alice, "one too many")

    assert [r.status_code for r in asked] == [201] * 5
    assert refused.status_code == 429
    assert int(refused["Retry-After"]) > 0
    assert Job.objects.count() == 5


def budget_left(username: str) -> float:
    user = User.objects.get(username=username)
    return get_rate_limit_value(USER_BUDGET, key=f"user:{user.pk}")


def test_a_question_refused_by_the_enqueue_rate_limit_costs_nothing(alice: Client) -> None:
    """The asker is charged in the same transaction as the enqueue: a refusal undoes it."""
    limited = {**settings.RATEQUEUE, "ENQUEUE_RATE_LIMIT": {"rate": 1, "period": 60}}
    with override_settings(RATEQUEUE=limited):
        assert ask(alice, "the first").status_code == 201
        before = budget_left("alice")
        refused = ask(alice, "the second")
        after = budget_left("alice")

    assert refused.status_code == 429
    assert "ratequeue:enqueue" in refused.json()["detail"]
    assert 0 <= after - before < 1  # refilled a little, charged nothing
    assert Job.objects.count() == 1


def test_a_question_refused_by_the_models_reservations_costs_nothing(alice: Client) -> None:
    """The model's budget (llm_tokens) is full, and reserved ahead to its max_reserved."""
    model = settings.RATEQUEUE["RATE_LIMITS"][MODEL_BUDGET]
    rate_limit(MODEL_BUDGET, count=model["capacity"] + model["max_reserved"], reserve=True)
    before = budget_left("alice")

    refused = ask(alice, "Is there room?")

    assert refused.status_code == 429
    assert MODEL_BUDGET in refused.json()["detail"]
    assert 0 <= budget_left("alice") - before < 1
    assert not Job.objects.exists()


def test_the_llm_queue_gives_each_user_the_limits_of_their_plan() -> None:
    """bob is on the "pro" plan: two questions at once, twice the share; alice the defaults."""
    keys = {}
    for name in ("alice", "bob"):
        request = RequestFactory().get("/ask/")
        request.user = User.objects.create_user(name, password=USERS[name])
        keys[name] = user_key(request)  # the concurrency key the ask page gives
    limits = KeyLimits()
    bob, alice = limits.of("llm", keys["bob"]), limits.of("llm", keys["alice"])
    assert (bob.max_concurrency, bob.weight) == (2, 2)
    assert (alice.max_concurrency, alice.weight) == (None, None)
