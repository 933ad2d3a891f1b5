"""The jobs admin: the list and its filters, a job's page with its attempts and traceback,
the cancel and retry actions, and the queue overview."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from django_ratequeue import Retry, Status, enqueue, get_handle
from django_ratequeue.admin.jobs import OUTPUT_SHOWN
from django_ratequeue.models import CancelRequest, Job, OutputChunk
from django_ratequeue.monitor import counts as monitor_counts
from tests.cluster import wait_for
from tests.queue import jobs
from tests.queue.steps import leading_loop, run_pass

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


def test_failed_job_page_shows_attempts_and_traceback(admin_client: Client, cluster) -> None:
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


def test_cancel_then_retry_through_the_admin(admin_client: Client, cluster) -> None:
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


@pytest.mark.django_db
def test_list_shows_whole_ids_and_cuts_paths_short_with_tooltips(admin_client: Client) -> None:
    """At 1,400 px the status and attempts columns must stay on screen: a 33-character id
    is shown whole (it wraps anywhere: a cut one names no job), a full dotted path short,
    whole in its title."""
    handle = enqueue(jobs.add, args=[1, 2], concurrency_key="tenant-" + "x" * 40)
    assert len(handle.id) == 33

    page = admin_client.get(CHANGELIST).content.decode()

    assert f">{handle.id}</a>" in page and "…" + handle.id[-10:] not in page
    assert '<span title="tests.queue.jobs.add">jobs.<wbr>add</span>' in page
    assert f'title="tenant-{"x" * 40}">tenant-{"x" * 8}…</a>' in page
    assert ">tests.queue.jobs.add<" not in page


@pytest.mark.django_db
def test_a_keys_link_lists_that_keys_jobs_whatever_it_holds(admin_client: Client) -> None:
    odd = enqueue(jobs.add, args=[1, 2], concurrency_key="a&b=c #1")
    enqueue(jobs.add, args=[1, 2], concurrency_key="a")
    page = admin_client.get(CHANGELIST).content.decode()
    assert '?concurrency_key=a%26b%3Dc+%231"' in page
    assert listed(admin_client, concurrency_key="a&b=c #1") == [odd.id]


@pytest.mark.django_db
def test_retry_policy_is_shown_in_words(admin_client: Client) -> None:
    default = enqueue(jobs.add, args=[1, 2])
    once = enqueue(jobs.add, args=[1, 2], retries=Retry(retry_count=1, initial_interval=90))
    none = enqueue(jobs.add, args=[1, 2], retries=0)

    def policy(handle_id: str) -> str:
        page = admin_client.get(f"{CHANGELIST}{handle_id}/change/").content.decode()
        return page.split("Retry policy:", 1)[1].split('<div class="readonly">', 1)[1]

    assert policy(default.id).startswith(
        "Up to 6 retries: the first 1 s after a failure, then twice as long each time, "
        "at most 1 h; each wait varies by up to 20%."
    )
    assert policy(once.id).startswith("Up to 1 retry: 1.5 min after the failure;")
    assert policy(none.id).startswith("No retries: the first failure is final.")
    assert (
        '"retry_count"'
        not in admin_client.get(f"{CHANGELIST}{default.id}/change/").content.decode()
    )


@pytest.mark.django_db
def test_a_jobs_page_has_cancel_and_retry_buttons(admin_client: Client) -> None:
    """Both buttons are on the page (the live page shows the one that fits the status as it
    changes); the one that does not fit yet is hidden."""
    waiting = enqueue(jobs.add, args=[1, 2])
    page = admin_client.get(f"{CHANGELIST}{waiting.id}/change/").content.decode()
    cancel_url = f"{CHANGELIST}{waiting.id}/cancel/"
    retry_url = f"{CHANGELIST}{waiting.id}/retry/"
    assert f'<li class="rq-cancel"><form method="post" action="{cancel_url}"' in page
    assert f'<li class="rq-retry" hidden><form method="post" action="{retry_url}"' in page

    assert admin_client.get(cancel_url).status_code == 405  # only by POST
    response = admin_client.post(cancel_url, follow=True)
    assert f"Asked to cancel {waiting.id}" in response.content.decode()
    assert list(CancelRequest.objects.values_list("job_id", flat=True)) == [waiting.id]

    Job.objects.filter(pk=waiting.id).update(status=Status.CANCELED)  # as the loop would
    page = admin_client.get(f"{CHANGELIST}{waiting.id}/change/").content.decode()
    assert f'<li class="rq-cancel" hidden><form method="post" action="{cancel_url}"' in page
    assert f'<li class="rq-retry"><form method="post" action="{retry_url}"' in page
    response = admin_client.post(retry_url, follow=True)
    copy = Job.objects.exclude(pk=waiting.id).get()
    assert f"Enqueued {copy.id}, a copy of {waiting.id}." in response.content.decode()
    assert response.redirect_chain[-1][0] == f"{CHANGELIST}{copy.id}/change/"


@pytest.mark.django_db
def test_a_button_of_a_page_left_open_says_why_it_did_nothing(admin_client: Client) -> None:
    """The job ended after its page was loaded: the ids in the messages stay as they are
    (the admin capitalises each message's first letter)."""
    handle = enqueue(jobs.add, args=[1, 2], id="flaky-0c1d")
    run_pass()  # runs it
    leading_loop().run(30)  # takes in its outcome
    assert handle.result(timeout=1) == 3
    canceled = admin_client.post(f"{CHANGELIST}{handle.id}/cancel/", follow=True)
    assert '<li class="warning">Job flaky-0c1d is already complete.</li>' in (
        canceled.content.decode()
    )
    retried = admin_client.post(f"{CHANGELIST}{handle.id}/retry/", follow=True)
    assert (
        '<li class="warning">Job flaky-0c1d is complete: only failed or canceled jobs are '
        "retried.</li>" in retried.content.decode()
    )
    assert not CancelRequest.objects.exists() and Job.objects.count() == 1


@pytest.mark.django_db
def test_viewers_get_no_buttons_and_cannot_post_them(client: Client) -> None:
    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(viewer)
    waiting = enqueue(jobs.add, args=[1, 2])

    page = client.get(f"{CHANGELIST}{waiting.id}/change/").content.decode()

    assert "/cancel/" not in page
    assert client.post(f"{CHANGELIST}{waiting.id}/cancel/").status_code == 403
    assert client.post(f"{CHANGELIST}{waiting.id}/retry/").status_code == 403
    assert not CancelRequest.objects.exists()


@pytest.mark.django_db
def test_the_job_list_reads_no_more_than_a_bounded_part_of_the_jobs(
    admin_client: Client, monkeypatch
) -> None:
    """No GROUP BY, DISTINCT or unbounded COUNT over the jobs table on a load of the list,
    the overview or the demo's state: their cost must not grow with the history kept."""
    monkeypatch.setattr(monitor_counts, "COUNT_LIMIT", 3)
    for n in range(5):
        enqueue(jobs.add, args=[n, n], queue=f"queue-{n % 2}")

    for url in [CHANGELIST, OVERVIEW, "/queue/state.json"]:
        with CaptureQueriesContext(connection) as queries:
            page = admin_client.get(url).content.decode()
        on_jobs = [q["sql"] for q in queries if 'FROM "django_ratequeue_job"' in q["sql"]]
        assert on_jobs, url
        for sql in on_jobs:
            assert "GROUP BY" not in sql and "DISTINCT" not in sql, sql
            assert "COUNT(" not in sql or "LIMIT" in sql, sql
    page = admin_client.get(CHANGELIST).content.decode()
    assert "Jobs are counted up to 3 and no further" in page
    assert 'href="?queue__exact=queue-1"' in page  # the queue filter still lists them
    assert len(listed(admin_client, queue__exact="queue-1")) == 2


@pytest.mark.django_db
def test_a_jobs_page_shows_its_progress_and_the_end_of_its_output(admin_client: Client) -> None:
    handle = enqueue(jobs.add, args=[2, 3])
    Job.objects.filter(pk=handle.id).update(progress={"done": 2, "total": 3, "note": "<b>"})
    OutputChunk.objects.bulk_create(
        [
            OutputChunk(job_id=handle.id, index=1, text="the beginning " + "a" * 6000),
            OutputChunk(job_id=handle.id, index=2, text="b" * 6000),
            OutputChunk(job_id=handle.id, index=3, text="<script>alert(1)</script> the end"),
        ]
    )

    page = admin_client.get(f"{CHANGELIST}{handle.id}/change/").content.decode()

    assert "Progress and output" in page
    assert "&quot;note&quot;: &quot;&lt;b&gt;&quot;" in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt; the end</pre>" in page
    assert "<script>alert(1)" not in page
    assert "the beginning" not in page  # bounded: the end of the output, not all of it
    length = 14 + 6000 + 6000 + 33
    assert f"3 chunks, {length} characters; the last {OUTPUT_SHOWN} shown" in page
