"""The "Ask the model" page: a signed-in user sends prompts to the rate-gated ``llm``
queue from the browser, and sees their token budget, a progress bar and the answer
streaming in.

The page is plain HTML and ``ratequeue.js``: after it loads, everything goes through
django_ratequeue's HTTP API (``/ratequeue/``): it enqueues :func:`.jobs.ask_model` (exposed
with ``@job(expose=True)``), follows the job's events and reads the budget from the public
rate limit. Two users in two browser windows take turns: the ``llm`` queue runs one
question per user at a time. The page lists the user's recent questions when it loads,
and follows the ones not answered yet, so a reload loses nothing.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.contrib.auth.decorators import login_required
from django.contrib.auth.views import LoginView
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.urls import reverse
from django.utils import timezone

from django_ratequeue.contrib.logins import protect_login
from django_ratequeue.engine.handles import owner_label
from django_ratequeue.models import Job
from example_project.demo import accounts, jobs
from example_project.demo.jobs import ASK_COST, MODEL_BUDGET, PROMPT_MAX_LENGTH, USER_BUDGET

# The questions the page lists again when it loads: the latest, of the last day.
RECENT_QUESTIONS = 10
RECENT_QUESTIONS_SINCE = timedelta(days=1)

login = protect_login("failed_logins")(
    LoginView.as_view(
        template_name="demo/login.html",
        redirect_authenticated_user=True,
        extra_context={"demo_users": accounts.USERS},
    )
)


def recent_questions(user: Any) -> list[dict[str, str]]:
    """Return the questions ``user`` asked in the last RECENT_QUESTIONS_SINCE, the latest
    RECENT_QUESTIONS of them, oldest first: the page follows them again after a reload
    (read through the jobs' creation index, then kept if ``user`` owns them)."""
    since = timezone.now() - RECENT_QUESTIONS_SINCE
    asked = Job.objects.filter(
        func=jobs.ask_model.path, owner=owner_label(user), created_at__gte=since
    ).order_by("-created_at", "-id")[:RECENT_QUESTIONS]
    return [
        {"id": job.id, "prompt": str(job.args[0]) if job.args else "", "status": job.status}
        for job in reversed(asked)
    ]


@login_required(login_url="demo:login")
def ask_page(request: HttpRequest) -> HttpResponse:
    client = {
        # Where django_ratequeue.urls is included: its enqueue URL is "<there>jobs/".
        "api": reverse("ratequeue:enqueue").removesuffix("jobs/"),
        "function": jobs.ask_model.path,
        "budgets": {"user": USER_BUDGET, "model": MODEL_BUDGET},
        "cost": ASK_COST,
        "questions": recent_questions(request.user),
    }
    context = {"client": client, "cost": ASK_COST, "prompt_max_length": PROMPT_MAX_LENGTH}
    return render(request, "demo/ask.html", context)
