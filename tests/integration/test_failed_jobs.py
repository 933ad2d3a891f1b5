"""Failed jobs: grouped by function and exception class in the admin and the command,
retried once however often the retry is asked for, discarded with permission only."""

from __future__ import annotations

from io import StringIO
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import call_command
from django.test import Client

from django_ratequeue import Status, enqueue
from django_ratequeue.failed import retry, retry_id
from django_ratequeue.models import Attempt, Job
from tests.queue import jobs
from tests.queue.steps import run_pass

FAILED = "/admin/django_ratequeue/job/failed/"
RETRY = "/admin/django_ratequeue/job/failed/retry/"
DISCARD = "/admin/django_ratequeue/job/failed/discard/"

pytestmark = pytest.mark.django_db


def fail_some() -> dict[str, list[str]]:
    """Run jobs that fail: three raising ValueError, one NonRetryableError, one that works."""
    no_retry: Any = {"retry_count": 0}
    ids = {
        "value": [enqueue(jobs.fail, retries=no_retry).id for _ in range(3)],
        "hard": [enqueue(jobs.fail_hard).id],
        "fine": [enqueue(jobs.add, args=[1, 2]).id],
    }
    for _ in range(3):
        run_pass()
    assert Job.objects.filter(status=Status.FAILED).count() == 4
    return ids


def group_of(job_id: str) -> dict[str, str]:
    job = Job.objects.get(pk=job_id)
    return {"func": job.func, "exception_class_path": job.exception_class_path}


def test_the_page_groups_failed_jobs_by_function_and_exception(admin_client: Client) -> None:
    ids = fail_some()
    page = admin_client.get(FAILED)
    assert page.status_code == 200
    groups = {(g.func, g.exception_label): g.jobs for g in page.context["groups"]}
    assert groups == {
        ("tests.queue.jobs.fail", "ValueError"): 3,
        ("tests.queue.jobs.fail_hard", "NonRetryableError"): 1,
    }
    assert group_of(ids["value"][0])["exception_class_path"] in page.content.decode()


def test_a_double_click_on_retry_copies_each_job_once(admin_client: Client) -> None:
    ids = fail_some()
    group = group_of(ids["value"][0])
    for _ in range(2):
        assert admin_client.post(RETRY, group).status_code == 302
    copies = Job.objects.filter(pk__in=[retry_id(i) for i in ids["value"]])
    assert copies.count() == 3 and Job.objects.count() == 5 + 3
    assert all(c.status == Status.WAITING and c.args == [] for c in copies)
    # A retried job leaves the failed view; the job page's retry finds the same copy.
    groups = {g.func: g.jobs for g in admin_client.get(FAILED).context["groups"]}
    assert groups == {"tests.queue.jobs.fail_hard": 1}
    again = retry(Job.objects.get(pk=ids["value"][0]))
    assert (again.enqueued, again.handle.id) == (False, retry_id(ids["value"][0]))
    page = admin_client.post(f"/admin/django_ratequeue/job/{ids['value'][0]}/retry/", follow=True)
    assert "was retried before" in page.content.decode()
    assert Job.objects.count() == 8


def test_discard_asks_first_then_deletes_the_group_and_its_attempts(admin_client: Client) -> None:
    ids = fail_some()
    group = group_of(ids["value"][0])
    confirm = admin_client.get(DISCARD, group)
    assert confirm.status_code == 200 and confirm.context["jobs"] == 3
    assert Job.objects.filter(pk__in=ids["value"]).count() == 3  # asking deletes nothing
    assert admin_client.post(DISCARD, group).status_code == 302
    assert not Job.objects.filter(pk__in=ids["value"]).exists()
    assert not Attempt.objects.filter(job_id__in=ids["value"]).exists()
    assert Job.objects.filter(pk__in=ids["hard"] + ids["fine"]).count() == 2


def test_retry_and_discard_need_their_permissions() -> None:
    ids = fail_some()
    viewer = User.objects.create_user("viewer", password="not-used", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_job"))
    client = Client()
    client.force_login(viewer)
    page = client.get(FAILED)
    assert page.status_code == 200 and not page.context["may_retry"]
    assert "Retry all" not in page.content.decode()
    group = group_of(ids["value"][0])
    assert client.post(RETRY, group).status_code == 403
    assert client.get(DISCARD, group).status_code == 403
    assert client.post(DISCARD, group).status_code == 403
    assert client.get(RETRY).status_code in (403, 405)
    assert Job.objects.count() == 5


def test_the_command_lists_retries_and_discards() -> None:
    ids = fail_some()
    out = StringIO()
    call_command("ratequeue_failed", stdout=out)
    assert "tests.queue.jobs.fail  builtins.ValueError" in out.getvalue()
    call_command(
        "ratequeue_failed", "--retry", "--function", "tests.queue.jobs.fail", stdout=StringIO()
    )
    call_command("ratequeue_failed", "--retry", stdout=(out := StringIO()))
    assert "Retried 1 job(s)" in out.getvalue()  # fail_hard's; fail's were retried before
    call_command("ratequeue_failed", "--discard", stdout=(out := StringIO()))
    assert "Discarded 0 failed job(s)" in out.getvalue()  # every failed job was retried
    assert (
        Job.objects.filter(pk__in=[retry_id(i) for i in ids["value"] + ids["hard"]]).count() == 4
    )


# (A lone surrogate cannot travel in a UTF-8 body; the view refuses it all the same.)
@pytest.mark.parametrize("value", ["a\x00b", "x" * 20_000])
def test_a_group_no_row_could_hold_is_a_bad_request(admin_client: Client, value: str) -> None:
    fail_some()
    for field in ("func", "exception_class_path"):
        group = {"func": "tests.queue.jobs.fail", "exception_class_path": "", field: value}
        assert admin_client.post(RETRY, group).status_code == 400
        assert admin_client.get(DISCARD, group).status_code == 400
    assert Job.objects.count() == 5
