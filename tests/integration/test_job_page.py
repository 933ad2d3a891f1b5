"""A job's admin page: the live view its script polls (staff only, the page's own
permission), the progress bar, and the links to its parent, children and callback."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_ratequeue import Status, enqueue
from django_ratequeue.admin import related
from django_ratequeue.admin.jobfields import progress_fraction
from django_ratequeue.admin.jobs import LIVE_FIELDS
from django_ratequeue.engine.models import new_job_id
from django_ratequeue.engine.transitions import create_callbacks
from django_ratequeue.engine.workerkeys import create_key
from django_ratequeue.models import Attempt, Job, OutputChunk
from tests.dashboard.test_views import claim_remote
from tests.queue import jobs
from tests.queue.steps import run_pass

JOBS = "/admin/django_ratequeue/job/"


def page(client: Client, job_id: str) -> str:
    return client.get(f"{JOBS}{job_id}/change/").content.decode()


def live(client: Client, job_id: str) -> Any:
    return client.get(f"{JOBS}{job_id}/live/")


def running(job_id: str, **changes: Any) -> None:
    """Make the job RUNNING with one started attempt, as the loop and a runner would."""
    now = timezone.now()
    Job.objects.filter(pk=job_id).update(status=Status.RUNNING, attempts=1, **changes)
    Attempt.objects.create(
        job_id=job_id, number=1, queue="default", dispatched_at=now, started_at=now, worker="w"
    )


@pytest.mark.django_db
def test_the_live_view_sends_the_changing_parts_of_the_page(admin_client: Client) -> None:
    handle = enqueue(jobs.add, args=[1, 2], owner="someone-else")  # staff see every owner's
    running(handle.id, progress={"done": 3, "total": 4})
    OutputChunk.objects.create(job_id=handle.id, index=1, text="<b>partial</b>")

    response = live(admin_client, handle.id)

    assert response.status_code == 200
    data = response.json()
    assert (data["id"], data["status"], data["final"]) == (handle.id, "running", False)
    assert data["progress"] == {"done": 3, "total": 4}
    assert (data["can_cancel"], data["can_retry"]) == (True, False)
    assert data["poll_after"] > 0
    fields = data["fields"]
    assert list(fields) == list(LIVE_FIELDS)
    assert fields["status"] == "Running"
    assert '<progress max="4.0" value="3.0"' in fields["progress_value"]
    assert "3 of 4 (75%)" in fields["progress_value"]
    assert "&lt;b&gt;partial&lt;/b&gt;</pre>" in fields["output_tail"]
    assert 'role="img"' in fields["attempt_timeline"]
    assert 'data-rows="1"' in fields["attempt_timeline"]
    # The page shows the same contents, in the fields the script replaces.
    shown = page(admin_client, handle.id)
    for name in ("progress_value", "output_tail"):
        assert f"field-{name}" in shown and fields[name] in shown

    Job.objects.filter(pk=handle.id).update(status=Status.FAILED, finished_at=timezone.now())
    data = live(admin_client, handle.id).json()
    assert (data["final"], data["can_cancel"], data["can_retry"]) == (True, False, True)


@pytest.mark.django_db
def test_the_live_view_is_for_staff_who_may_view_jobs(client: Client) -> None:
    handle = enqueue(jobs.add, args=[1, 2])

    anonymous = live(client, handle.id)
    assert anonymous.status_code == 302 and "/login/" in anonymous["Location"]

    visitor = User.objects.create_user("visitor")
    visitor.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(visitor)  # not staff: the admin's login page, never the job
    response = live(client, handle.id)
    assert response.status_code == 302 and "/login/" in response["Location"]

    other = User.objects.create_user("other", is_staff=True)
    other.user_permissions.add(Permission.objects.get(codename="view_queuesetting"))
    client.force_login(other)
    assert live(client, handle.id).status_code == 403
    assert live(client, "no-such-job").status_code == 403  # nothing said about ids either

    viewer = User.objects.create_user("viewer", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client.force_login(viewer)
    data = live(client, handle.id).json()
    assert data["status"] == "waiting"
    assert (data["can_cancel"], data["can_retry"]) == (False, False)  # no permission


@pytest.mark.django_db
def test_the_live_view_of_an_unknown_job_is_404(admin_client: Client) -> None:
    assert live(admin_client, "no-such-job").status_code == 404
    assert live(admin_client, quote("a/b?c")).status_code == 404


@pytest.mark.django_db
def test_the_page_starts_following_only_an_unfinished_job(admin_client: Client) -> None:
    handle = enqueue(jobs.add, args=[1, 2])
    shown = page(admin_client, handle.id)
    assert f'data-url="{JOBS}{handle.id}/live/" data-final="false"' in shown
    assert "ratequeue/jobpage.js" in shown and "ratequeue/jobpage.css" in shown

    Job.objects.filter(pk=handle.id).update(status=Status.COMPLETE, finished_at=timezone.now())
    assert 'data-final="true">This job is complete.' in page(admin_client, handle.id)


def test_progress_reads_as_a_fraction_only_when_it_says_how_far() -> None:
    assert progress_fraction({"done": 3, "total": 10}) == (3, 10)
    assert progress_fraction({"step": 2, "steps": 5, "name": "copy"}) == (2, 5)
    assert progress_fraction({"percent": 140}) == (100, 100)
    assert progress_fraction({"done": 12, "total": 10}) == (10, 10)
    for value in (
        None,
        {"step": "download"},
        {"done": 1, "total": 0},
        {"done": True, "total": 2},
        {"done": "1", "total": 2},
        {"done": float("nan"), "total": 2},
        [1, 2],
    ):
        assert progress_fraction(value) is None, value


@pytest.mark.django_db
def test_a_job_links_to_its_parent_children_and_callback(admin_client: Client) -> None:
    parent = enqueue(jobs.add, args=[1, 2], on_complete=jobs.callback, context={"path": "x"})
    running(parent.id)
    children = [Job.objects.get(pk=enqueue(jobs.add, args=[n, n]).id) for n in range(3)]
    Job.objects.filter(pk__in=[c.pk for c in children]).update(parent_id=parent.id)
    unrelated = enqueue(jobs.add, args=[0, 0])
    job = Job.objects.get(pk=parent.id)
    job.status, job.finished_at = Status.COMPLETE, timezone.now()
    Job.objects.filter(pk=job.pk).update(status=job.status, finished_at=job.finished_at)
    create_callbacks([job], job.finished_at)  # as the loop does when the job ends
    callback = Job.objects.get(func="tests.queue.jobs.callback")

    shown = page(admin_client, parent.id)
    for child in children:
        assert f'href="{JOBS}{child.pk}/change/" class="rq-job-link">{child.pk}</a>' in shown
    assert f"{JOBS}{unrelated.id}/change/" not in shown
    assert f'href="{JOBS}{callback.pk}/change/" class="rq-job-link"' in shown

    of_child = page(admin_client, children[0].pk)
    assert f'href="{JOBS}{parent.id}/change/" class="rq-job-link">{parent.id}</a>' in of_child
    of_callback = page(admin_client, callback.pk)
    assert "Callback of" in of_callback and f"{JOBS}{parent.id}/change/" in of_callback

    Attempt.objects.filter(job_id=parent.id).delete()  # pruned after RETENTION
    Job.objects.filter(pk=parent.id).delete()
    assert "no longer kept" in page(admin_client, children[0].pk)


@pytest.mark.django_db
def test_the_first_children_are_listed_through_their_index(admin_client: Client) -> None:
    """Children are read by ``parent_id`` through its partial index, the oldest
    CHILDREN_SHOWN of them, and the page says when there are more."""
    parent = enqueue(jobs.add, args=[1, 2])
    running(parent.id)
    start = timezone.now()
    count = related.CHILDREN_SHOWN + 2
    Job.objects.bulk_create(
        Job(
            id=new_job_id(),
            func="tests.queue.jobs.add",
            args=[n, n],
            start_at=start,
            created_at=start + timedelta(milliseconds=n),
            retry={},
            parent_id=parent.id if n < count else "",
        )
        for n in range(count + 5)
    )

    with CaptureQueriesContext(connection) as queries:
        shown = page(admin_client, parent.id)

    assert shown.count('class="rq-job-link"') == related.CHILDREN_SHOWN
    assert f"Only the first {related.CHILDREN_SHOWN} are listed" in shown
    (search,) = [q["sql"] for q in queries if '"parent_id" =' in q["sql"]]
    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN {'QUERY PLAN ' if connection.vendor == 'sqlite' else ''}{search}")
        plan = " ".join(str(row) for row in cursor.fetchall())
    assert "ratequeue_job_children" in plan, plan


@pytest.mark.postgres_only
@pytest.mark.django_db
def test_the_related_jobs_are_read_through_indexes(admin_client: Client) -> None:
    """Even when PostgreSQL might rather scan the whole table (many jobs, a common
    ``parent_id``), every read of the job page's related jobs (and of its live view) goes
    through an index."""
    parent = enqueue(jobs.add, args=[1, 2], on_complete=jobs.callback)
    running(parent.id)
    with connection.cursor() as cursor:
        cursor.execute(
            """
            INSERT INTO django_ratequeue_job (id, func, args, kwargs, queue, concurrency_key,
                priority, status, start_at, created_at, attempts, retry, on_complete, owner,
                cost, tokens_reserved, cancel_requested, parent_id, error, traceback,
                exception_class_path, finished_at)
            SELECT 'filler-' || g, 'f', '[]', '{}', 'default', '', 0, 'complete',
                %(at)s + (g - 30000) * interval '1 ms', %(at)s + (g - 30000) * interval '1 ms',
                1, '{}', '', '', 1, false, false,
                CASE WHEN g <= 30000 AND g %% 20 = 0 THEN %(parent)s ELSE '' END,
                '', '', '', %(at)s + (g - 30000) * interval '1 ms'
            FROM generate_series(1, 60000) g
            """,
            # Many jobs created while the parent ran, and a parent_id so common that a
            # whole scan of the table looks cheap (on rows made up before their parent).
            {"at": Job.objects.get(pk=parent.id).created_at, "parent": parent.id},
        )
        cursor.execute("ANALYZE django_ratequeue_job")
    Job.objects.filter(pk=parent.id).update(status=Status.COMPLETE, finished_at=timezone.now())

    with CaptureQueriesContext(connection) as queries:
        assert live(admin_client, parent.id).status_code == 200
    plans = []
    with connection.cursor() as cursor:
        for query in queries:
            if 'FROM "django_ratequeue_job"' in query["sql"]:
                cursor.execute(f"EXPLAIN {query['sql']}")
                plans.append("\n".join(row[0] for row in cursor.fetchall()))
    assert len(plans) >= 3  # the job, its callback, its children
    for plan in plans:
        assert "Seq Scan on django_ratequeue_job" not in plan, plan


@pytest.mark.django_db
def test_the_attempts_table_names_a_remote_worker_by_its_key_and_instance(
    admin_client: Client,
) -> None:
    gpu, _key = create_key("gpu box", ["remote"])
    claim_remote(gpu, "w1")
    attempt = Attempt.objects.select_related("worker_key").get()
    shown = page(admin_client, attempt.job_id)
    assert attempt.worker_label == "gpu box/w1"
    assert f'<td title="{attempt.worker_label}">gpu box/w1</td>' in shown


@pytest.mark.django_db
def test_tracebacks_show_the_jobs_frames_not_the_librarys(admin_client: Client) -> None:
    failed = enqueue(jobs.fail, retries={"retry_count": 0})
    run_pass()
    run_pass()
    stored = Job.objects.get(pk=failed.id).traceback
    assert "django_ratequeue/" in stored  # recorded whole: the page leaves them out
    html = page(admin_client, failed.id)
    field = html[html.index("field-formatted_traceback") :]
    shown = field[: field.index("</pre>")]
    assert "tests/queue/jobs.py" in shown and "ValueError: boom" in shown
    assert "django_ratequeue/" not in shown
    assert "Cancel requested" in html and 'alt="False"' not in html
