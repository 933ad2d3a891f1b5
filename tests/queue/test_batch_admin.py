"""The admin's batch pages: progress, jobs and callback; a job's page links its batch."""

from __future__ import annotations

import pytest
from django.test import Client
from django.urls import reverse

from django_ratequeue import batch
from django_ratequeue.models import Batch
from django_ratequeue.plugins.batches.models import batch_callback_id
from tests.queue import batch_jobs, jobs
from tests.queue.steps import run_pass

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_batch_page_shows_its_progress_jobs_and_callback(admin_client: Client) -> None:
    with batch(on_complete=batch_jobs.record_outcome, context={"path": "/dev/null"}) as group:
        first = jobs.add.enqueue(1, 1)
        jobs.add.using(run_after=3600).enqueue(2, 2)
    run_pass()
    run_pass()
    page = admin_client.get(reverse("admin:django_ratequeue_batch_change", args=[group.id]))
    assert page.status_code == 200
    text = page.content.decode()
    assert "1 of 2" in text and first.id in text and "sealed: its jobs are running" in text
    assert "runs once every job of the batch has ended" in text
    group.cancel()
    run_pass()
    text = admin_client.get(
        reverse("admin:django_ratequeue_batch_change", args=[group.id])
    ).content.decode()
    assert "finished (canceled)" in text and batch_callback_id(group.id) in text
    listing = admin_client.get(reverse("admin:django_ratequeue_batch_changelist"))
    assert listing.status_code == 200 and group.id in listing.content.decode()
    job_page = admin_client.get(reverse("admin:django_ratequeue_job_change", args=[first.id]))
    assert reverse("admin:django_ratequeue_batch_change", args=[group.id]) in (
        job_page.content.decode()
    )


def test_the_cancel_action_cancels_a_batchs_jobs(admin_client: Client) -> None:
    with batch() as group:
        jobs.add.using(run_after=3600).enqueue(2, 2)
    response = admin_client.post(
        reverse("admin:django_ratequeue_batch_changelist"),
        {"action": "cancel_selected", "_selected_action": [group.id]},
    )
    assert response.status_code == 302
    run_pass()
    assert Batch.objects.get(pk=group.id).finished_at is not None
