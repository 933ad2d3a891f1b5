"""The "Ask the model" page: a signed-in user sends prompts to the rate-gated ``llm``
queue from the browser, and sees their token budget, a progress bar and the answer
streaming in.

The page is plain HTML and ``ratequeue.js``: after it loads, everything goes through
django_ratequeue's HTTP API (``/ratequeue/``): it enqueues :func:`.jobs.ask_model` (exposed
with ``@job(expose=True)``), follows the job's events and reads the budget from the public
rate limit. Two users in two browser windows take turns: the ``llm`` queue runs one
question per user at a time.
"""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse

from django_ratequeue.contrib.logins import protect_login

from . import accounts, jobs
from .jobs import ASK_COST, MODEL_BUDGET, PROMPT_MAX_LENGTH, USER_BUDGET

login = protect_login("failed_logins")(
    LoginView.as_view(
        template_name="demo/login.html",
        redirect_authenticated_user=True,
        extra_context={"demo_users": accounts.USERS},
    )
)


@login_required(login_url="demo:login")
def ask_page(request: HttpRequest) -> HttpResponse:
    client = {
        # Where django_ratequeue.urls is included: its enqueue URL is "<there>jobs/".
        "api": reverse("ratequeue:enqueue").removesuffix("jobs/"),
        "function": jobs.ask_model.path,
        "budgets": {"user": USER_BUDGET, "model": MODEL_BUDGET},
        "cost": ASK_COST,
    }
    context = {"client": client, "cost": ASK_COST, "prompt_max_length": PROMPT_MAX_LENGTH}
    return render(request, "demo/ask.html", context)
