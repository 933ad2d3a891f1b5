"""The admin's queue dashboard in a real browser, against a live server and a real
cluster: it renders its charts and tables, and updates without a reload while jobs run.

With ``RATEQUEUE_SCREENSHOTS=<directory>`` the test also saves the dashboard's pictures for
the docs there, in the light and the dark theme (``dashboard-light.png``,
``dashboard-dark.png``)::

    RATEQUEUE_SCREENSHOTS=docs/images pytest tests/browser/test_dashboard.py
"""

from __future__ import annotations

import os
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from django.contrib.auth.models import User

from django_ratequeue import clock, enqueue, pause_queue, rate_limit
from django_ratequeue.models import QueueMinute
from django_ratequeue.plugins.rollups.counting import bucket_of, floor_minute
from django_ratequeue.plugins.rollups.models import HISTOGRAM_BUCKETS, bucket_field
from tests.browser.pages import shows
from tests.queue import jobs

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

DASHBOARD = "/admin/django_ratequeue/job/dashboard/"
PASSWORD = "a-long-test-password"


def log_in_to_the_admin(browser: Chrome, live_server: Any) -> None:
    User.objects.create_superuser("operator", password=PASSWORD)
    browser.get(f"{live_server.url}/admin/login/?next={DASHBOARD}")
    browser.find_element("id", "id_username").send_keys("operator")
    browser.find_element("id", "id_password").send_keys(PASSWORD)
    browser.find_element("css selector", "#login-form [type=submit]").click()
    shows(browser, lambda b: urlsplit(b.current_url).path == DASHBOARD, "the dashboard")


def record_an_hour(queues: dict[str, int]) -> None:
    """An hour of per-minute figures behind us, as the loop would have kept them: each
    queue starts about ``queues[name]`` jobs a minute, with a daily-looking swell."""
    now = floor_minute(clock.now())
    for name, rate in queues.items():
        for back in range(1, 60):
            started = max(0, rate + (back % 17) - 8)
            waits = [0.05 * (1 + back % 7)] * started
            runs = [0.2 + 0.01 * (back % 11)] * started
            buckets = dict.fromkeys(
                [bucket_field(h, b) for h in ("wait", "run") for b in range(HISTOGRAM_BUCKETS)], 0
            )
            for wait in waits:
                buckets[bucket_field("wait", bucket_of(wait))] += 1
            for run in runs:
                buckets[bucket_field("run", bucket_of(run))] += 1
            QueueMinute.objects.create(
                queue=name,
                minute=now - timedelta(minutes=back),
                enqueued=started + (back % 3),
                started=started,
                completed=max(0, started - back % 4),
                failed=back % 4 if back % 5 == 0 else 0,
                retried=back % 2,
                **buckets,
            )


def count_shown(browser: Chrome, queue: str, column: str) -> str | None:
    """The count the queues table shows for ``queue`` in ``column`` (e.g. "complete")."""
    return browser.execute_script(
        """
        const [queue, column] = arguments;
        const heads = [...document.querySelectorAll("table.rq-queues thead th")];
        const index = heads.findIndex((th) => th.textContent.trim() === column);
        const row = [...document.querySelectorAll("table.rq-queues tr.rq-queue")]
            .find((tr) => tr.dataset.queue === queue);
        return row && index >= 0 ? row.children[index].textContent.trim() : null;
        """,
        queue,
        column,
    )


def chart_summary(browser: Chrome, queue: str, chart: str) -> str:
    """The description of ``queue``'s ``chart`` (throughput, depth, wait, run), "" if the
    page has no such chart."""
    return browser.execute_script(
        """
        const [queue, chart] = arguments;
        const section = [...document.querySelectorAll("section.rq-queue-charts")]
            .find((s) => s.dataset.queue === queue);
        const selector = `svg[aria-labelledby$="-${chart}-desc"] desc`;
        const desc = section && section.querySelector(selector);
        return desc ? desc.textContent : "";
        """,
        queue,
        chart,
    )


def busiest_keys(browser: Chrome) -> list[list[str]]:
    """The rows of the busiest keys' table, as the page shows them."""
    return browser.execute_script(
        """
        return [...document.querySelectorAll("table.rq-keys tbody tr")]
            .map((tr) => [...tr.children].map((td) => td.textContent.trim()));
        """
    )


def rate_limit_use(browser: Chrome, name: str) -> str:
    """The share of the limit ``name`` the page shows in use, e.g. "75%"."""
    return browser.execute_script(
        """
        const row = [...document.querySelectorAll("table.rq-limits tbody tr")]
            .find((tr) => tr.children[0].textContent.trim() === arguments[0]);
        return row ? row.children[1].textContent.trim() : "";
        """,
        name,
    )


def first_chart_title(browser: Chrome) -> str:
    """Read in one script: the body may be swapped between two WebDriver calls."""
    return browser.execute_script(
        'return document.querySelector(".rq-chart title")?.textContent ?? "";'
    )


def save_screenshots(browser: Chrome, directory: Path) -> None:
    """The top of the dashboard, light then dark (the admin follows the system's theme)."""
    directory.mkdir(parents=True, exist_ok=True)
    browser.set_window_size(1440, 1500)
    for scheme in ("light", "dark"):
        browser.execute_cdp_cmd(
            "Emulation.setEmulatedMedia",
            {"features": [{"name": "prefers-color-scheme", "value": scheme}]},
        )
        browser.execute_script("document.activeElement.blur(); window.scrollTo(0, 0);")
        browser.save_screenshot(str(directory / f"dashboard-{scheme}.png"))
    # Below the charts: the busiest keys, the rate limits and the workers (light theme).
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia",
        {"features": [{"name": "prefers-color-scheme", "value": "light"}]},
    )
    browser.set_window_size(1440, 1000)
    browser.execute_script('document.getElementById("rq-keys").scrollIntoView();')
    browser.save_screenshot(str(directory / "dashboard-tables.png"))
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})


def test_the_dashboard_shows_the_queues_and_follows_jobs_live(
    live_server: Any, cluster: Any, browser: Callable[..., Chrome]
) -> None:
    cluster()
    record_an_hour({"emails": 20, "llm": 6})
    page = browser()
    log_in_to_the_admin(page, live_server)

    # Rendered: the summary, the queues, a chart per figure with its text alternative.
    charts = page.find_elements("css selector", ".rq-chart svg[role=img]")
    assert len(charts) >= 4 * 3  # all queues, emails, llm
    titles = [c.get_attribute("aria-labelledby") for c in charts]
    assert all(t and t.endswith("-desc") for t in titles)
    first = page.find_element("css selector", ".rq-chart desc").get_attribute("textContent")
    assert first and "started:" in first and "in all" in first
    assert count_shown(page, "emails", "complete") == "0"

    # Live: jobs run on the cluster and the page shows them, without reloading: their
    # counts, and the charts of their queue (it had none: nothing happened in it before).
    page.execute_script("window.notReloaded = true;")
    assert not chart_summary(page, "default", "throughput")
    handles = [enqueue(jobs.add, args=[n, n], queue="default") for n in range(5)]
    handles.append(enqueue(jobs.fail_hard, queue="default"))
    for handle in handles[:-1]:
        handle.result(timeout=60)
    shows(page, lambda b: count_shown(b, "default", "complete") == "5", "5 complete jobs shown")
    shows(page, lambda b: count_shown(b, "default", "failed") == "1", "1 failed job shown")
    throughput = shows(
        page,
        lambda b: (
            "failed: 1 in all" in (text := chart_summary(b, "default", "throughput")) and text
        ),
        "the default queue's throughput chart",
    )
    assert "started: 6 in all" in throughput and "completed: 5 in all" in throughput
    assert "no data" not in chart_summary(page, "default", "run")
    assert page.execute_script("return window.notReloaded === true;")

    # A queue paused with a backlog: its badge and counts change live too.
    pause_queue("llm")
    for n in range(12):
        enqueue(jobs.add, args=[n, 1], queue="llm", concurrency_key=f"user-{n % 3}")
    shows(page, lambda b: count_shown(b, "llm", "waiting") == "12", "12 waiting jobs shown")
    assert count_shown(page, "llm", "state") == "paused"
    assert page.execute_script("return window.notReloaded === true;")

    # Rate limits drawn on, and jobs running with concurrency keys: live too.
    rate_limit("send_message", count=15)
    rate_limit("free_trial_signup", count=100)
    for key in ["tenant-a", "tenant-a", "tenant-b"]:
        enqueue(jobs.sleep, args=[30], queue="emails", concurrency_key=key)
    shows(page, lambda b: rate_limit_use(b, "free_trial_signup") == "100%", "a limit all used")
    # 15 of 20 used, less a token every 6 s since.
    assert 55 <= int(rate_limit_use(page, "send_message").rstrip("%")) <= 75
    shows(
        page,
        lambda b: (
            busiest_keys(b)[:2]
            == [
                ["emails", "tenant-a", "2 at its limit", "2", "1"],
                ["emails", "tenant-b", "1", "2", "1"],
            ]
        ),
        "the busiest keys",
    )

    # The window toggle is a link, reachable by keyboard; it swaps the charts in place.
    day = page.find_element("css selector", ".rq-window a[data-window=day]")
    day.send_keys("\n")
    shows(page, lambda b: "the last day" in first_chart_title(b), "the day's charts")
    assert page.execute_script("return window.notReloaded === true;")
    assert urlsplit(page.current_url).query == "window=day"
    page.find_element("css selector", ".rq-window a[data-window=hour]").send_keys("\n")
    shows(page, lambda b: "the last hour" in first_chart_title(b), "the hour's charts")

    # Live updates can be paused and resumed by keyboard; the button says its state.
    pause = page.find_element("id", "rq-live-toggle")
    pause.send_keys(" ")
    assert (pause.get_attribute("aria-pressed"), pause.text) == ("true", "Resume live updates")
    assert page.find_element("id", "rq-live-status").text == "Live updates paused."
    pause.send_keys(" ")
    assert (pause.get_attribute("aria-pressed"), pause.text) == ("false", "Pause live updates")

    if directory := os.environ.get("RATEQUEUE_SCREENSHOTS"):
        save_screenshots(page, Path(directory))

    # Logged out meanwhile: the page says so and stops asking, rather than showing the
    # login form in place of the dashboard.
    page.delete_all_cookies()
    status = shows(
        page,
        lambda b: (
            "session ended" in (text := b.find_element("id", "rq-live-status").text) and text
        ),
        "the page to notice the session ended",
    )
    assert status == "Live updates stopped: your session ended. Reload the page to log in again."
    assert page.find_elements("css selector", "#rq-live table.rq-queues")
    assert not page.find_elements("css selector", "#rq-live #login-form")
