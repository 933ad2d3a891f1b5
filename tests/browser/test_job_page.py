"""A job's admin page in a real browser, against a live server and a real cluster: the
attempts' timeline gets a row per attempt as the job retries, the progress bar and the
output follow a streaming job, and the Cancel and Retry buttons follow the job's status,
without reloading the page.

With ``RATEQUEUE_SCREENSHOTS=docs/images`` the first test also saves the screenshots of
docs/admin.md, in the admin's light and dark themes.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from django.contrib.auth.models import User

from django_ratequeue import Retry, enqueue, get_handle
from django_ratequeue.models import Job
from tests.browser.pages import shows
from tests.cluster import ROOT
from tests.queue import jobs

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

PASSWORD = "not-a-secret"
WORDS = ["the", "queue", "started", "it", "when", "its", "rate", "limit", "had", "room"]

# What the page shows of the job, read in one go.
READ_PAGE = """
const svg = document.querySelector(".field-attempt_timeline svg.rq-timeline");
const bar = document.querySelector(".field-progress_value progress");
const output = document.querySelector(".field-output_tail .rq-output pre");
// Shown as laid out (a stylesheet can show an element that has the hidden attribute).
const visible = (selector) => {
    const item = document.querySelector(selector);
    return item !== null && item.getClientRects().length > 0;
};
return {
    status: document.querySelector(".field-status .readonly").textContent.trim(),
    rows: svg ? Number(svg.dataset.rows) : 0,
    waitBars: svg ? svg.querySelectorAll("rect.rq-wait").length : 0,
    runBars: Array.from(
        svg ? svg.querySelectorAll("rect.rq-run") : [], (r) => r.getAttribute("class")
    ),
    backoffs: svg ? svg.querySelectorAll("line.rq-backoff").length : 0,
    tableRows: document.querySelectorAll(".field-attempt_timeline tbody tr.rq-attempt").length,
    done: bar ? bar.value : null,
    total: bar ? bar.max : null,
    output: output ? output.textContent : "",
    notice: document.getElementById("rq-live").textContent,
    cancel: visible("li.rq-cancel"),
    retry: visible("li.rq-retry"),
    sameDocument: window.rqLoaded === true,
};
"""


def log_in_to_admin(browser: Chrome, live_server: Any) -> None:
    User.objects.create_superuser("admin", password=PASSWORD)
    browser.get(f"{live_server.url}/admin/login/?next=/admin/")
    browser.find_element("id", "id_username").send_keys("admin")
    browser.find_element("id", "id_password").send_keys(PASSWORD)
    browser.find_element("css selector", "#login-form input[type=submit]").click()
    shows(browser, lambda b: b.find_elements("id", "site-name"), "the admin's index")


def open_job(browser: Chrome, live_server: Any, job_id: str) -> None:
    """Open the job's page and mark the document: a reload would lose the mark."""
    browser.get(f"{live_server.url}/admin/django_ratequeue/job/{job_id}/change/")
    shows(browser, lambda b: b.find_elements("id", "rq-live"), "the job's page")
    browser.execute_script("window.rqLoaded = true;")


def read(browser: Chrome) -> dict[str, Any]:
    page: dict[str, Any] = browser.execute_script(READ_PAGE)
    return page


def save_screenshots(browser: Chrome, folder: Path) -> None:
    """The job's page in the light and the dark theme (the admin follows the system's)."""
    folder.mkdir(parents=True, exist_ok=True)
    # The admin's navigation sidebar folded away, so that the page has the width.
    browser.execute_script(
        "if (document.getElementById('main').classList.contains('shifted'))"
        "    document.getElementById('toggle-nav-sidebar').click();"
    )
    for scheme in ("light", "dark"):
        browser.execute_cdp_cmd(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
        )
        shows(
            browser,
            lambda b, scheme=scheme: b.execute_script(
                f"return matchMedia('(prefers-color-scheme: {scheme})').matches"
            ),
            f"the {scheme} theme",
        )
        # From the progress down to the related jobs: what this page adds.
        browser.execute_script(
            "document.querySelector('.field-progress_value').closest('fieldset').scrollIntoView();"
        )
        path = folder / f"job-page-{scheme}.png"
        browser.save_screenshot(str(path))
        print(f"saved {path}")


def test_a_job_that_fails_then_succeeds_shows_both_attempts(
    live_server: Any, cluster: Any, browser: Callable[..., Chrome], tmp_path: Path
) -> None:
    cluster()
    page = browser()
    log_in_to_admin(page, live_server)
    handle = enqueue(
        jobs.stream_then_fail_once,
        args=[str(tmp_path / "failed-once"), WORDS, 0.15],
        retries=Retry(retry_count=2, initial_interval=1.5, randomize_interval=False),
    )
    open_job(page, live_server, handle.id)

    first = shows(page, lambda b: (p := read(b)) and p["rows"] >= 1 and p, "an attempt's row")
    assert first["cancel"] and not first["retry"]
    done = shows(page, lambda b: (p := read(b)) and p["status"] == "Complete" and p, "success")

    assert done["sameDocument"], "the page was reloaded"
    assert done["rows"] == done["waitBars"] == done["tableRows"] == 2
    assert done["runBars"] == ["rq-run rq-failed", "rq-run rq-succeeded"]
    assert done["backoffs"] == 1
    assert done["done"] == done["total"] == len(WORDS)
    assert done["notice"] == "This job is complete."
    assert not done["cancel"] and not done["retry"]
    attempts = handle.attempts()
    assert [a.outcome for a in attempts] == ["failed", "succeeded"]

    if folder := os.environ.get("RATEQUEUE_SCREENSHOTS"):
        save_screenshots(page, ROOT / folder)


def test_a_streaming_job_shows_its_progress_and_output_as_they_come(
    live_server: Any, cluster: Any, browser: Callable[..., Chrome]
) -> None:
    cluster()
    page = browser()
    log_in_to_admin(page, live_server)
    handle = enqueue(jobs.stream_words, args=[[f"{w} " for w in WORDS], 0.25])
    open_job(page, live_server, handle.id)

    partial = shows(
        page,
        lambda b: (p := read(b)) and p["done"] and 0 < p["done"] < p["total"] and p,
        "the progress bar part of the way",
    )
    assert partial["status"] == "Running"
    streamed = shows(
        page,
        lambda b: (p := read(b)) and p["output"] and p["done"] < p["total"] and p,
        "part of the output",
    )
    assert "".join(f"{w} " for w in WORDS).startswith(streamed["output"])
    assert streamed["runBars"] == ["rq-run rq-running"]
    done = shows(page, lambda b: (p := read(b)) and p["status"] == "Complete" and p, "the end")
    assert done["output"] == "".join(f"{w} " for w in WORDS)
    assert done["done"] == done["total"] == len(WORDS)
    assert done["runBars"] == ["rq-run rq-succeeded"]
    assert done["sameDocument"], "the page was reloaded"
    assert handle.result(timeout=5) == len(WORDS)


def test_the_buttons_follow_the_jobs_status(
    live_server: Any, cluster: Any, browser: Callable[..., Chrome]
) -> None:
    """Cancel shows while the job is unfinished; once the cancel applies, the live page
    swaps it for Retry, which enqueues a copy and opens its page."""
    cluster()
    page = browser()
    log_in_to_admin(page, live_server)
    handle = enqueue(jobs.add, args=[2, 3], run_after=timedelta(hours=1))
    open_job(page, live_server, handle.id)
    shown = read(page)
    assert shown["status"] == "Scheduled" and shown["cancel"] and not shown["retry"]

    page.find_element("css selector", "li.rq-cancel button").click()
    shows(page, lambda b: "Asked to cancel" in b.page_source, "the cancel's message")
    page.execute_script("window.rqLoaded = true;")  # the form's answer was a new page
    canceled = shows(page, lambda b: (p := read(b)) and p["status"] == "Canceled" and p, "cancel")
    assert canceled["sameDocument"] and canceled["retry"] and not canceled["cancel"]

    page.find_element("css selector", "li.rq-retry button").click()
    copy = shows(
        page,
        lambda b: "a copy of" in b.page_source and Job.objects.exclude(pk=handle.id).first(),
        "the copy's page",
    )
    assert f"/job/{copy.pk}/change/" in page.current_url
    assert get_handle(copy.pk).result(timeout=30) == 5
