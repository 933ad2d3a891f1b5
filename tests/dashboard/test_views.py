"""The admin dashboard page and its live body: who may see them, what they show, and how
they take hostile names and unknown parameters."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from django_ratequeue import Status, clock, enqueue, pause_queue
from django_ratequeue.engine import protocol
from django_ratequeue.engine.heartbeat import beat, mark_serving
from django_ratequeue.engine.workerkeys import create_key
from django_ratequeue.models import Attempt, Job, QueueMinute, WorkerHeartbeat, WorkerKey
from django_ratequeue.plugins.rollups.counting import floor_minute
from tests.queue import jobs
from tests.queue.steps import leading_loop

DASHBOARD = "/admin/django_ratequeue/job/dashboard/"
LIVE = "/admin/django_ratequeue/job/dashboard/live/"
PAGES = [DASHBOARD, LIVE]


def log_in(client: Client, *codenames: str, staff: bool = True, username: str = "someone") -> User:
    user = User.objects.create_user(username, password="not-used", is_staff=staff)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    client.force_login(user)
    return user


def claim_remote(key: WorkerKey, instance: str, count: int = 1) -> None:
    """Enqueue ``count`` jobs on the remote queue, dispatch them and claim them as the
    remote worker ``instance`` of ``key`` does."""
    for n in range(count):
        enqueue(jobs.add, args=[n, 1], queue="remote")
    leading_loop().run(30)
    assert (
        len(
            protocol.claim_remote(
                protocol.Claimant.remote(key, instance), ["remote"], [], count
            ).attempts
        )
        == count
    )


def running(job_id: str, worker: str | None = None) -> None:
    """Make the job RUNNING with an attempt a worker started (as the loop and a runner would).

    The worker is this process's (its heartbeat written) unless ``worker`` names one."""
    worker = worker or beat(force=True)
    job = Job.objects.get(pk=job_id)
    Job.objects.filter(pk=job_id).update(status=Status.RUNNING, attempts=1)
    now = clock.now()
    Attempt.objects.create(
        job=job,
        number=1,
        queue=job.queue,
        concurrency_key=job.concurrency_key,
        dispatched_at=now,
        started_at=now,
        worker=worker,
    )


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES)
def test_anonymous_visitors_are_sent_to_the_login_page(client: Client, page: str) -> None:
    response = client.get(page)
    assert response.status_code == 302
    assert response["Location"].startswith("/admin/login/?next=")


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES)
def test_users_who_are_not_staff_are_refused(client: Client, page: str) -> None:
    log_in(client, "view_job", staff=False)
    response = client.get(page)
    assert response.status_code == 302  # the admin's login page: staff only
    assert "/admin/login/" in response["Location"]


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES)
def test_staff_without_the_view_permission_on_jobs_get_403(client: Client, page: str) -> None:
    log_in(client, "view_queuesetting", "view_ratelimitstate")
    assert client.get(page).status_code == 403


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES)
def test_staff_who_may_view_jobs_see_it(client: Client, page: str) -> None:
    log_in(client, "view_job")
    response = client.get(page)
    assert response.status_code == 200
    assert b"Busiest concurrency keys" in response.content


@pytest.mark.django_db
@pytest.mark.parametrize("window", ["week", "", "HOUR", "hour'--", "<b>"])
@pytest.mark.parametrize("page", PAGES)
def test_an_unknown_window_is_a_400_that_names_the_choices(
    admin_client: Client, page: str, window: str
) -> None:
    response = admin_client.get(page, {"window": window})
    assert response.status_code == 400
    assert response.content == b"Unknown window: choose one of hour, day."


@pytest.mark.django_db
def test_the_page_shows_state_limits_keys_rate_limits_workers_and_charts(
    admin_client: Client,
) -> None:
    worker = beat(force=True)  # this process's worker, its runner serving 8 slots
    mark_serving(worker, 8)
    for n in range(3):
        enqueue(jobs.add, args=[n, 1], queue="llm", concurrency_key="alice")
    running(enqueue(jobs.add, args=[0, 0], queue="emails", concurrency_key="bob").id, worker)
    running(enqueue(jobs.add, args=[0, 0], queue="emails", concurrency_key="bob").id, worker)
    enqueue(jobs.add, args=[1, 1], queue="emails")
    pause_queue("llm")
    create_key("gpu box", ["remote"])
    minute = floor_minute(clock.now())
    QueueMinute.objects.create(queue="emails", minute=minute - timedelta(minutes=2), started=7)
    QueueMinute.objects.create(queue="emails", minute=minute, started=3, completed=2)

    response = admin_client.get(DASHBOARD)
    assert response.status_code == 200
    page = response.content.decode()
    queues = {q.name: q for q in response.context["snapshot"].queues}
    assert queues["llm"].paused and not queues["llm"].saturated
    assert queues["emails"].saturated  # emails: 2 per key, bob runs 2
    assert queues["emails"].in_use == 2
    busy = response.context["snapshot"].busiest_keys
    assert [(b.queue, b.key, b.running, b.at_limit) for b in busy] == [("emails", "bob", 2, True)]
    assert '<span class="rq-badge rq-badge-paused">paused</span>' in page
    assert '<span class="rq-badge rq-badge-saturated">saturated</span>' in page
    assert "llm_tokens" in page and "token bucket: 1200 per minute, capacity 200" in page
    heartbeat = WorkerHeartbeat.objects.get(pk=worker)
    assert heartbeat.host in page and str(heartbeat.pid) in page and "gpu box" in page
    [local] = response.context["snapshot"].local_workers
    assert (local.running, local.slots) == (2, 8)
    assert "runner serving 8 slots" in page
    # The charts of all queues and of the active queues, with their text alternatives.
    total = response.context["total"].state
    assert [f.started for f in total.series][-3:] == [7, 0, 3]
    assert len(total.series) == 60
    assert (
        "jobs started, completed and failed per interval, the last hour. started: 10 in all"
        in page
    )
    assert page.count('role="img"') == 4 * (1 + len(response.context["charted"]))
    assert response.context["charted"][0].state.name == "emails"  # the busiest first
    # Links: the queue's jobs, the key's jobs, the live body.
    assert (
        "?queue__exact=emails" in page and "?concurrency_key=bob&amp;queue__exact=emails" in page
    )
    assert f'data-live-url="{LIVE}"' in page


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES)
def test_the_pages_show_what_remote_workers_run(admin_client: Client, page: str) -> None:
    gpu, _key = create_key("gpu box", ["remote"])
    claim_remote(gpu, "w1", count=2)
    response = admin_client.get(page)
    assert response.status_code == 200
    [key] = response.context["snapshot"].remote_workers
    assert (key.prefix, key.running, key.instances) == (gpu.prefix, 2, {"w1": 2})
    assert "2 on w1" in response.content.decode()


@pytest.mark.django_db
def test_the_day_window_sums_quarters_of_an_hour(admin_client: Client) -> None:
    minute = floor_minute(clock.now())
    QueueMinute.objects.create(queue="emails", minute=minute, started=3)
    QueueMinute.objects.create(queue="emails", minute=minute - timedelta(hours=3), started=4)
    response = admin_client.get(DASHBOARD, {"window": "day"})
    total = response.context["total"].state
    assert len(total.series) == 96
    assert sum(f.started for f in total.series) == 7
    assert total.series[1].start - total.series[0].start == timedelta(minutes=15)
    page = response.content.decode()
    assert 'aria-current="true">Last day' in page
    assert 'data-interval="30000"' in page  # a day's points change slowly: fewer reads
    assert 'data-interval="5000"' in admin_client.get(DASHBOARD).content.decode()


@pytest.mark.django_db
def test_the_live_body_is_the_pages_body_alone_and_never_cached(admin_client: Client) -> None:
    enqueue(jobs.add, args=[1, 1], queue="emails")
    response = admin_client.get(LIVE, {"window": "day"})
    body = response.content.decode()
    assert response.status_code == 200
    assert "no-store" in response["Cache-Control"]
    assert body.lstrip().startswith('<div class="rq-body"')
    assert "<html" not in body and "the last day" in body


HOSTILE = ["<script>alert(1)</script>", '"><img src=x onerror=alert(1)>', "%s%(x)s{0}"]


@pytest.mark.django_db
@pytest.mark.parametrize("page", PAGES)
def test_hostile_queue_names_and_keys_are_escaped_everywhere(
    admin_client: Client, page: str
) -> None:
    minute = floor_minute(clock.now())
    for name in HOSTILE:
        running(enqueue(jobs.add, args=[1, 1], queue=name, concurrency_key=name).id)
        QueueMinute.objects.create(queue=name, minute=minute, started=1)
    response = admin_client.get(page)
    assert response.status_code == 200
    content = response.content.decode()
    assert "<script>alert" not in content and "<img src=x" not in content
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in content
    assert "&quot;&gt;&lt;img src=x onerror=alert(1)&gt;" in content
    assert "%s%(x)s{0}" in content  # shown as it is, never used as a format
    assert len(response.context["charted"]) == 3


@pytest.mark.django_db
def test_the_dashboard_is_linked_from_the_indexes_the_job_list_and_the_overview(
    admin_client: Client,
) -> None:
    for page in ["/admin/", "/admin/django_ratequeue/"]:
        row = '<a href="/admin/django_ratequeue/queuedashboard/">Queue dashboard</a>'
        assert row in admin_client.get(page).content.decode(), page
    for page in ["/admin/django_ratequeue/job/", "/admin/django_ratequeue/job/overview/"]:
        assert f'href="{DASHBOARD}"' in admin_client.get(page).content.decode(), page


@pytest.mark.django_db
def test_viewers_without_job_permission_get_no_link_on_the_app_index(client: Client) -> None:
    log_in(client, "view_queuesetting")
    app_index = client.get("/admin/django_ratequeue/").content.decode()
    assert DASHBOARD not in app_index and "queuedashboard" not in app_index


def index_rows(client: Client) -> dict[str, str]:
    """Return the models the site's admin index lists, by name, with each row's URL."""
    app_list = client.get("/admin/").context["app_list"]
    return {model["name"]: model["admin_url"] for app in app_list for model in app["models"]}


@pytest.mark.django_db
def test_the_sites_admin_index_lists_the_dashboard_for_who_may_see_it(client: Client) -> None:
    log_in(client, "view_job")
    rows = index_rows(client)
    assert list(rows) == ["Jobs", "Queue dashboard"]
    response = client.get(rows["Queue dashboard"], follow=True)
    assert response.redirect_chain == [(DASHBOARD, 302)]
    assert b"Busiest concurrency keys" in response.content

    log_in(client, "view_queuesetting", username="settings only")
    assert list(index_rows(client)) == ["Queue settings"]
    assert client.get("/admin/django_ratequeue/queuedashboard/").status_code == 403


@pytest.mark.django_db
def test_no_worker_is_told_first_on_the_dashboard_the_job_list_and_the_job_page(
    admin_client: Client,
) -> None:
    handle = enqueue(jobs.add, args=[1, 2])
    job_page = f"/admin/django_ratequeue/job/{handle.id}/change/"
    overview = "/admin/django_ratequeue/job/overview/"
    for page in (DASHBOARD, LIVE, "/admin/django_ratequeue/job/", job_page, overview):
        html = admin_client.get(page).content.decode()
        assert "No worker is running" in html, page
        assert "python manage.py qcluster" in html
        assert "a follower takes it over" not in html
        if page in (DASHBOARD, LIVE):
            # Above everything else the body shows, and in the queue's badges.
            assert html.index("No worker is running") < html.index('id="rq-queues"')
            assert "can start more" not in html and "no worker runs it" in html
            assert 'rq-badge-no-worker">no worker<' in html
    beat(force=True)  # a django-q2 worker's agent beats: one is alive
    for page in (DASHBOARD, "/admin/django_ratequeue/job/", job_page, overview):
        assert "No worker is running" not in admin_client.get(page).content.decode(), page


@pytest.mark.django_db
def test_a_remote_queue_nobody_claims_from_is_told_while_its_jobs_wait(
    admin_client: Client, settings: Any
) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "QUEUES": {"gpu": {"remote": True}}}
    beat(force=True)
    assert "rq-no-worker" not in admin_client.get("/admin/django_ratequeue/job/").content.decode()
    enqueue(jobs.add, args=[1, 2], queue="gpu")
    html = admin_client.get("/admin/django_ratequeue/job/").content.decode()
    assert "No remote worker claims from queue <strong>gpu</strong>" in html
    assert "No worker is running" not in html
