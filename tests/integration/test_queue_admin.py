"""The jobs admin: the list and its filters, a job's page with its attempts and traceback,
the cancel and retry actions, and the queue overview."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from django_ratequeue import Retry, Status, enqueue, get_handle
from django_ratequeue.models import CancelRequest, Job
from tests.queue import jobs
from tests.queue.conftest import cluster, wait_for  # noqa: F401 (the cluster fixture)

CHANGELIST = "/admin/django_ratequeue/job/"
OVERVIEW = "/admin/django_ratequeue/job/overview/"


def listed(client: Client, **query: str) -> list[str]:
    changelist = client.get(CHANGELIST, query).context["cl"]
    return sorted(job.id for job in changelist.result_list)


def run_action(client: Client, action: str, *ids: str) -> str:
    response = client.post(
        CHANGELIST, {"action": action, "_selected_action": list(ids)}, follow=True
    )
    assert response.status_code == 200
    return response.content.decode()


@pytest.mark.django_db
def test_changelist_filters_by_status_queue_and_key_and_searches(admin_client: Client) -> None:
    enqueue(jobs.add, args=[1, 2], id="add-now")
    enqueue(jobs.add, args=[3, 4], id="add-later", run_after=timedelta(hours=1))
    enqueue(jobs.echo, args=["hi"], id="mail-ann", queue="emails", concurrency_key="ann")
    enqueue(jobs.echo, args=["hi"], id="mail-bob", queue="emails", concurrency_key="bob")

    assert listed(admin_client) == ["add-later", "add-now", "mail-ann", "mail-bob"]
    assert listed(admin_client, status__exact="scheduled") == ["add-later"]
    assert listed(admin_client, queue__exact="emails") == ["mail-ann", "mail-bob"]
    assert listed(admin_client, concurrency_key="bob") == ["mail-bob"]
    assert listed(admin_client, q="mail-ann") == ["mail-ann"]
    assert listed(admin_client, q="tests.queue.jobs.add") == ["add-later", "add-now"]
    page = admin_client.get(CHANGELIST).content.decode()
    assert f'href="{CHANGELIST}?concurrency_key=ann"' in page  # a key leads to its filter


@pytest.mark.django_db
def test_changelist_and_overview_count_jobs_per_queue_and_status(admin_client: Client) -> None:
    enqueue(jobs.add, args=[1, 2])
    enqueue(jobs.add, args=[1, 2], run_after=timedelta(hours=1))
    enqueue(jobs.echo, queue="emails")

    for url in [CHANGELIST, OVERVIEW]:
        overview = admin_client.get(url).context["overview"]
        counts = {q.name: q.counts for q in overview.queues}
        assert counts["default"][Status.WAITING] == 1
        assert counts["default"][Status.SCHEDULED] == 1
        assert counts["emails"][Status.WAITING] == 1
        assert {q.name: q.limit_label for q in overview.queues}["emails"] == "2"

    page = admin_client.get(OVERVIEW).content.decode()
    assert f'href="{CHANGELIST}?queue__exact=emails&amp;status__exact=waiting"' in page
    assert "Main loop" in page
    assert "No worker has reported recently" in page
    assert OVERVIEW in admin_client.get(CHANGELIST).content.decode()


@pytest.mark.django_db
def test_jobs_cannot_be_added_edited_or_deleted_by_hand(admin_client: Client) -> None:
    handle = enqueue(jobs.add, args=[1, 2])

    page = admin_client.get(f"{CHANGELIST}{handle.id}/change/")
    assert page.status_code == 200
    assert 'name="status"' not in page.content.decode()
    assert admin_client.get(f"{CHANGELIST}add/").status_code == 403
    assert admin_client.get(f"{CHANGELIST}{handle.id}/delete/").status_code == 403
    assert "delete_selected" not in admin_client.get(CHANGELIST).content.decode()


@pytest.mark.django_db
def test_viewers_see_jobs_but_cannot_cancel_or_retry(client: Client) -> None:
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(viewer)
    handle = enqueue(jobs.add, args=[1, 2])

    page = client.get(CHANGELIST).content.decode()

    assert handle.id in page
    assert "cancel_selected" not in page and "retry_selected" not in page
    assert client.get(OVERVIEW).status_code == 200


@pytest.mark.django_db
def test_cancel_action_files_cancel_requests_for_unfinished_jobs(admin_client: Client) -> None:
    waiting = enqueue(jobs.add, args=[1, 2])

    page = run_action(admin_client, "cancel_selected", waiting.id)

    assert "Asked to cancel 1 job(s)" in page
    assert list(CancelRequest.objects.values_list("job_id", flat=True)) == [waiting.id]
    # Only the loop changes a job's status.
    assert waiting.status() == Status.WAITING


@pytest.mark.django_db
def test_retry_copies_the_call_of_a_function_with_parameters_named_like_options(
    admin_client: Client,
) -> None:
    """The copy gets the original's arguments and options, whatever the function's
    parameters are called (the django.tasks backend's job has ``args`` and ``kwargs``)."""
    original = enqueue(
        jobs.route, args=["x"], kwargs={"args": [1], "kwargs": {}}, queue="q", priority=2
    )
    Job.objects.filter(pk=original.id).update(status=Status.CANCELED)

    run_action(admin_client, "retry_selected", original.id)

    copy = Job.objects.exclude(pk=original.id).get()
    assert (copy.args, copy.kwargs, copy.queue, copy.priority) == (
        ["x"],
        {"args": [1], "kwargs": {}},
        "q",
        2,
    )


def test_failed_job_page_shows_attempts_and_traceback(admin_client: Client, cluster) -> None:  # noqa: F811
    cluster()
    handle = enqueue(
        jobs.fail,
        args=["disk on fire"],
        retries=Retry(retry_count=1, initial_interval=0.1, randomize_interval=False),
    )
    wait_for(lambda: handle.status() == Status.FAILED, message="the job to fail twice")

    page = admin_client.get(f"{CHANGELIST}{handle.id}/change/").content.decode()

    assert "<pre>Traceback (most recent call last):" in page
    assert "ValueError: disk on fire" in page
    attempts = handle.attempts()
    assert [a.number for a in attempts] == [1, 2]
    for attempt in attempts:
        assert attempt.worker in page
    assert page.count("<summary>") == 2  # each attempt's error opens its traceback
    assert page.count("Failed</td>") == 2


def test_cancel_then_retry_through_the_admin(admin_client: Client, cluster) -> None:  # noqa: F811
    cluster()
    later = enqueue(
        jobs.add, args=[2, 3], run_after=timedelta(hours=1), queue="emails", priority=5
    )
    done = enqueue(jobs.add, args=[1, 1])
    assert done.result(timeout=30) == 2

    page = run_action(admin_client, "cancel_selected", later.id, done.id)
    assert "Asked to cancel 1 job(s); 1 already finished job(s) left as they are" in page
    wait_for(lambda: later.status() == Status.CANCELED, message="the cancel to apply")

    page = run_action(admin_client, "retry_selected", later.id, done.id)
    assert "1 selected job(s) are not failed or canceled" in page
    copy = Job.objects.exclude(id__in=[later.id, done.id]).get()
    assert f"Enqueued 1 new job(s): {later.id} → {copy.id}." in page
    assert (copy.func, copy.args, copy.queue, copy.priority) == (
        "tests.queue.jobs.add",
        [2, 3],
        "emails",
        5,
    )
    assert get_handle(copy.id).result(timeout=30) == 5
    assert later.status() == Status.CANCELED  # the original stays as it ended
