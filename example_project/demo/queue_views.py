"""The queue demo: buttons that enqueue bursts of jobs, and a live table of what they do.

The page polls ``queue/state.json`` (the per-queue counts, the loop, the latest demo jobs)
and redraws itself; the jobs run on the django-q2 cluster that ``scripts/demo.sh`` starts.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.contrib import messages
from django.http import Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from django_ratequeue import Handle, JobDoesNotExist, batch, get_batch, get_handle
from django_ratequeue.models import Batch, Job
from django_ratequeue.monitor.overview import queue_overview
from example_project.demo import jobs

RECENT_JOBS = 40


def _flaky_burst() -> list[Handle]:
    ids = [f"flaky-{uuid.uuid4().hex[:8]}" for _ in range(3)]
    return [jobs.flaky.using(id=job_id).enqueue(job_id) for job_id in ids]


def _llm_burst() -> list[Handle]:
    """A heavy user's 12 summaries, then a light user's 2: they take turns (fairness),
    and each start waits for its tokens (the queue reserves them)."""
    heavy = [
        jobs.summarize.using(concurrency_key="heavy", cost=40).enqueue("heavy", n)
        for n in range(12)
    ]
    light = [
        jobs.summarize.using(concurrency_key="light", cost=40).enqueue("light", n)
        for n in range(2)
    ]
    return heavy + light


def _batch_burst() -> list[Handle]:
    """8 fast jobs as one batch: its callback runs once, when all of them have ended."""
    with batch(on_complete=jobs.batch_finished):
        return jobs.fast.enqueue_many(range(1, 9))


@dataclass(frozen=True)
class Burst:
    label: str
    enqueue: Callable[[], list[Handle]]


BURSTS = {
    "fast": Burst("10 fast jobs (0.2 s each)", lambda: jobs.fast.enqueue_many(range(1, 11))),
    "slow": Burst("3 slow jobs (4 s each)", lambda: jobs.slow.enqueue_many([4, 4, 4])),
    "flaky": Burst("3 jobs that fail twice, then succeed", _flaky_burst),
    "broken": Burst(
        "2 jobs that always fail", lambda: jobs.broken.enqueue_many(["invoice 7", "invoice 8"])
    ),
    "emails": Burst(
        '6 e-mails (1 s each, queue "emails": 2 at a time)',
        lambda: jobs.send_email.enqueue_many([f"user{n}@example.com" for n in range(1, 7)]),
    ),
    "llm": Burst(
        '14 LLM calls (queue "llm": per-user turns, 1,200 tokens/min, 40 each)', _llm_burst
    ),
    "remote": Burst(
        '4 jobs for the remote worker (queue "remote", over HTTP)',
        lambda: jobs.on_remote_worker.enqueue_many([1, 2, 3, 4]),
    ),
    "batch": Burst("A batch of 8 fast jobs, with one callback when all have ended", _batch_burst),
}


def queue_page(request: HttpRequest) -> HttpResponse:
    return render(request, "demo/queue.html", {"bursts": BURSTS, "recent_jobs": RECENT_JOBS})


@require_POST
def enqueue_burst(request: HttpRequest) -> HttpResponse:
    burst = BURSTS.get(request.POST.get("kind", ""))
    if burst is None:
        messages.error(request, f"Pick one of: {', '.join(BURSTS)}.")
        return redirect("demo:queue")
    handles = burst.enqueue()
    messages.success(request, f"Enqueued {burst.label}: {len(handles)} job(s).")
    return redirect("demo:queue")


def _job_json(job: Job) -> dict[str, Any]:
    return {
        "id": job.id,
        "function": job.func.rpartition(".")[2],
        "args": job.args,
        "queue": job.queue,
        "status": job.status,
        "attempts": job.attempts,
        "created_at": job.created_at.isoformat(),
        "finished_at": job.finished_at.isoformat() if job.finished_at else None,
        "result": job.result,
        "error": job.error,
    }


@require_GET
def queue_state(request: HttpRequest) -> JsonResponse:
    """Counts per queue, the loop, and the latest RECENT_JOBS jobs, newest first (read
    through the index on created_at; ``more_jobs``: there are older ones, which the admin
    lists)."""
    recent = list(Job.objects.order_by("-created_at", "-pk")[: RECENT_JOBS + 1])
    return JsonResponse(
        {
            **queue_overview().as_json(),
            "jobs": [_job_json(j) for j in recent[:RECENT_JOBS]],
            "more_jobs": len(recent) > RECENT_JOBS,
            "batch": _latest_batch(),
        }
    )


def _latest_batch() -> dict[str, Any] | None:
    """The latest batch's progress (``{"done", "total"}``) and whether it finished, if any."""
    latest = Batch.objects.order_by("-created_at", "-pk").values_list("pk", flat=True).first()
    if latest is None:
        return None
    handle = get_batch(latest)
    return {"id": latest, **handle.progress(), "finished": handle.finished()}


@require_POST
def cancel_job(request: HttpRequest, job_id: str) -> JsonResponse:
    try:
        handle = get_handle(job_id)
    except JobDoesNotExist:
        raise Http404(f"No job {job_id}") from None
    handle.cancel()
    return JsonResponse({"id": job_id, "cancel_requested": True})
