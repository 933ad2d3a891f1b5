"""What the browser tests do on the demo's pages: log in, wait for what a page shows.

No selenium import at run time: without it, conftest.py skips these tests with the reason
instead of failing to import them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from example_project.demo.accounts import USERS
from tests.cluster import wait_for

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

TIMEOUT = 60


def shows(browser: Chrome, condition: Callable[[Chrome], Any], message: str) -> Any:
    """What ``condition(browser)`` returns once it is truthy; fails after TIMEOUT seconds."""
    return wait_for(lambda: condition(browser), TIMEOUT, message)


def log_in(browser: Chrome, live_server: Any, username: str) -> None:
    """Log in through the demo's login form, as a person would, and land on the ask page."""
    browser.get(f"{live_server.url}/ask/")  # anonymous: sent to the login page
    browser.find_element("id", "id_username").send_keys(username)
    browser.find_element("id", "id_password").send_keys(USERS[username])
    browser.find_element("css selector", "form.box button").click()
    # The path, not the URL's end: the login page's own URL ends with ?next=/ask/ too.
    shows(
        browser, lambda b: urlsplit(b.current_url).path == "/ask/", f"{username} on the ask page"
    )


def budget(browser: Chrome) -> int:
    """The whole tokens the page says are left of the user's budget, once it has read them."""
    text: str = shows(
        browser,
        lambda b: b.execute_script(
            'const text = document.querySelector("#budget-user .budget-text").textContent;'
            'return text === "Loading…" ? null : text;'
        ),
        "the budget to be shown",
    )
    assert " tokens left" in text, text
    return int(text.split(" of ")[0])


def question(browser: Chrome) -> dict[str, Any] | None:
    """What the page shows of its first question: status, progress and answer."""
    return browser.execute_script(
        """
        const item = document.querySelector("#questions li");
        if (!item) return null;
        const progress = item.querySelector(".progress");
        const answer = item.querySelector(".answer");
        return {
            id: item.dataset.jobId, status: item.dataset.status,
            done: progress.value, total: progress.max,
            answer: answer.textContent, busy: answer.getAttribute("aria-busy"),
            statusText: item.querySelector(".status").textContent,
        };
        """
    )
