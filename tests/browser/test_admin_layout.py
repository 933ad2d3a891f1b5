"""The admin's pages of a busy site at 1,400 pixels wide, the navigation sidebar open (as
Django's admin starts): none scrolls sideways, nothing sticks out of its box, and no
button lies over a table. Measured on the pages as Chromium lays them out."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db.models import F
from django.test import Client, override_settings

from django_ratequeue import Retry, clock, enqueue, pause_queue
from django_ratequeue.engine.workerkeys import create_key
from django_ratequeue.models import Job, WorkerHeartbeat
from django_ratequeue.plugins.schedules.sync import sync_schedules
from example_project.demo.accounts import create_demo_accounts
from example_project.settings import RATEQUEUE as EXAMPLE_SETTINGS
from tests.browser.pages import layout_problems, shows
from tests.cluster import ROOT
from tests.dashboard.test_views import claim_remote
from tests.queue import jobs
from tests.queue.steps import leading_loop, run_pass

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

WIDTH = 1400
DEMO_SCHEDULES = EXAMPLE_SETTINGS["SCHEDULES"]
PASSWORD = "a-long-test-password"
# An error as real ones come: a long line without a space to break it at.
LONG_ERROR = "https://api.example.com/v1/" + "/".join(f"segment-{n}" for n in range(30))


def a_busy_site() -> str:
    """Make jobs in every status over several queues, a job that failed with a long error,
    a remote worker at work, the example's schedules and a user locked out of logging in;
    return the failed job's id."""
    # Retried at once: the step that takes its failure in starts the retry (a retry a few
    # milliseconds later is due, or not, by how fast the steps below run).
    failed = enqueue(
        jobs.fail, args=[LONG_ERROR], retries=Retry(retry_count=1, initial_interval=0)
    )
    for n in range(3):
        enqueue(jobs.add, args=[n, n], queue="emails", concurrency_key=f"tenant-{n}")
        enqueue(jobs.block_until_file, args=["/nonexistent", "never", 0], queue="llm", cost=10)
    run_pass()  # the first attempts run
    leading_loop().run(30)  # their outcomes are taken in; the failed one retries
    run_pass()
    leading_loop().run(30)
    assert Job.objects.get(pk=failed.id).status == "failed"
    pause_queue("llm")
    for n in range(12):
        enqueue(jobs.add, args=[n, 1], queue="llm", concurrency_key=f"user-{n % 3}", cost=10)
        enqueue(jobs.add, args=[n, 2], run_after=3600)
    claim_remote(create_key("gpu box", ["remote"])[0], "w1")
    with override_settings(RATEQUEUE={**settings.RATEQUEUE, "SCHEDULES": DEMO_SCHEDULES}):
        sync_schedules(clock.now())  # the example project's schedules, as the loop syncs them
    create_demo_accounts()
    for _ in range(11):  # the demo's login allows 10 failures an hour
        Client().post("/accounts/login/", {"username": "alice", "password": "wrong"})
    return failed.id


def log_in(browser: Chrome, live_server: Any) -> None:
    User.objects.create_superuser("operator", password=PASSWORD)
    browser.set_window_size(WIDTH, 1000)
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element("id", "id_username").send_keys("operator")
    browser.find_element("id", "id_password").send_keys(PASSWORD)
    browser.find_element("css selector", "#login-form [type=submit]").click()
    shows(browser, lambda b: b.find_elements("id", "site-name"), "the admin's index")


@dataclass
class BusyAdmin:
    """A browser logged in to the admin of a busy site (:func:`a_busy_site`)."""

    browser: Chrome
    url: str
    failed_job: str

    def visit(self, path: str) -> list[str]:
        """Open ``path`` and return what keeps it from fitting the window."""
        self.browser.get(f"{self.url}{path}")
        shows(self.browser, lambda b: b.find_elements("id", "content"), path)
        return layout_problems(self.browser)


@pytest.fixture
def busy_admin(live_server: Any, browser: Callable[..., Chrome]) -> BusyAdmin:
    failed = a_busy_site()
    page = browser()
    log_in(page, live_server)
    return BusyAdmin(page, live_server.url, failed)


@pytest.mark.parametrize(
    "path",
    [
        "/admin/",
        "/admin/django_ratequeue/job/",
        "/admin/django_ratequeue/job/overview/",
        "/admin/django_ratequeue/job/dashboard/",
        "/admin/django_ratequeue/ratelimitstate/",
        "/admin/django_ratequeue/workerkey/",
        "/admin/django_ratequeue/schedule/",
        "/admin/django_ratequeue/queuesetting/",
    ],
)
def test_the_admins_pages_fit_the_window(busy_admin: BusyAdmin, path: str) -> None:
    assert busy_admin.visit(path) == []


def test_a_failed_jobs_tracebacks_stay_in_their_boxes(busy_admin: BusyAdmin) -> None:
    assert busy_admin.visit(f"/admin/django_ratequeue/job/{busy_admin.failed_job}/change/") == []
    opened = busy_admin.browser.execute_script(
        "const all = document.querySelectorAll('.field-attempt_timeline details');"
        "all.forEach((d) => { d.open = true; }); return all.length;"
    )
    assert opened == 2  # one per attempt
    assert layout_problems(busy_admin.browser) == []


TICKS_APART = """
const boxes = [...document.querySelectorAll(".rq-timeline text.rq-tick")]
    .map((t) => t.getBoundingClientRect());
const touching = boxes.slice(1).filter((b, i) => b.left < boxes[i].right);
return [boxes.length, touching.length];
"""


def field_text(browser: Chrome, name: str) -> str:
    text: str = browser.find_element("css selector", f".field-{name} .readonly").text
    return text


def test_the_job_page_reads_right(busy_admin: BusyAdmin) -> None:
    """Its axis labels apart, its times to the second, "no" in words, the job's own frames."""
    busy_admin.visit(f"/admin/django_ratequeue/job/{busy_admin.failed_job}/change/")
    page = busy_admin.browser
    labels, touching = page.execute_script(TICKS_APART)
    assert labels >= 2 and touching == 0
    for name in ("created_time", "start_time", "finished_time"):
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3} \S+", field_text(page, name))
    assert field_text(page, "cancel_asked") == "no"
    assert not page.find_elements("css selector", ".field-cancel_asked img")
    traceback = page.find_element("css selector", ".field-formatted_traceback pre")
    shown = traceback.get_attribute("textContent") or ""
    assert "tests/queue/jobs.py" in shown and "ValueError" in shown
    assert "django_ratequeue/" not in shown


def test_the_lists_show_whole_ids_and_buttons_of_one_size(busy_admin: BusyAdmin) -> None:
    assert busy_admin.visit("/admin/django_ratequeue/job/") == []
    ids = [e.text for e in busy_admin.browser.find_elements("css selector", ".field-short_id")]
    assert ids and set(ids) <= set(Job.objects.values_list("id", flat=True))
    assert busy_admin.visit("/admin/django_ratequeue/job/failed/") == []
    sizes = busy_admin.browser.execute_script(
        "return [...document.querySelectorAll('.rq-group-actions .rq-action')].map((b) => {"
        " const r = b.getBoundingClientRect(); const s = getComputedStyle(b);"
        " return [Math.round(r.height), s.fontSize, s.paddingTop]; });"
    )
    assert len(sizes) == 2 and sizes[0] == sizes[1]
    assert busy_admin.visit("/admin/django_ratequeue/schedule/") == []
    headers = [
        e.text.lower()
        for e in busy_admin.browser.find_elements("css selector", "#result_list thead th")
    ]
    assert headers.count("runs") == 1 and "recurrence" in headers


def test_the_job_lists_counts_sit_under_its_title(busy_admin: BusyAdmin) -> None:
    """The per-queue counts come below the title and its buttons, leaving the title whole."""
    assert busy_admin.visit("/admin/django_ratequeue/job/") == []
    title, counts = busy_admin.browser.execute_script(
        "const box = (e) => { const r = e.getBoundingClientRect();"
        " return {top: r.top, bottom: r.bottom, height: r.height,"
        " font: parseFloat(getComputedStyle(e).fontSize)}; };"
        "return [box(document.querySelector('#content h1')),"
        " box(document.querySelector('table.ratequeue-counts'))];"
    )
    assert title["height"] < 2 * title["font"], title  # one line, not squeezed
    assert counts["top"] >= title["bottom"], (title, counts)


def test_the_demos_queue_page_fits_the_window(busy_admin: BusyAdmin) -> None:
    page = busy_admin.browser
    page.get(f"{busy_admin.url}/queue/")
    shows(page, lambda b: b.find_elements("css selector", "table tbody tr"), "the queue's jobs")
    widths = page.execute_script(
        "const p = document.documentElement; return [p.scrollWidth, p.clientWidth];"
    )
    assert widths[0] <= widths[1], widths


def test_no_worker_is_told_in_the_first_screen(busy_admin: BusyAdmin) -> None:
    """No qcluster runs here: the dashboard and the job list say so above the fold.

    With ``RATEQUEUE_SCREENSHOTS=<directory>`` it saves the dashboard so
    (``dashboard-no-worker.png``, docs/admin.md)."""
    # The test process ran the jobs as a worker would: a minute later, it is gone.
    WorkerHeartbeat.objects.update(seen_at=F("seen_at") - timedelta(minutes=1))
    page = busy_admin.browser
    for path in ("/admin/django_ratequeue/job/dashboard/", "/admin/django_ratequeue/job/"):
        busy_admin.visit(path)
        top = page.execute_script(
            "const b = document.querySelector('.rq-no-worker');"
            "return b && b.getBoundingClientRect().bottom <= window.innerHeight;"
        )
        assert top, path
        assert "No worker is running" in page.find_element("css selector", ".rq-no-worker").text
    if directory := os.environ.get("RATEQUEUE_SCREENSHOTS"):
        busy_admin.visit("/admin/django_ratequeue/job/dashboard/")
        page.set_window_size(WIDTH, 900)
        page.save_screenshot(str(ROOT / directory / "dashboard-no-worker.png"))
