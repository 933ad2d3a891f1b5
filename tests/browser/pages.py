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


# What keeps a page from fitting its window, measured on the laid-out page: the page or a
# box in it scrolling sideways, an element sticking out of the content area, the page's
# buttons (the admin's object tools, the dashboard's controls) lying over a table, and a
# blank tail below the content.
LAYOUT_PROBLEMS = """
const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "")
    + (el.classList.length ? "." + [...el.classList].join(".") : "");
const problems = [];
const page = document.documentElement;
if (page.scrollWidth > page.clientWidth) {
    problems.push(`the page scrolls sideways: ${page.scrollWidth} > ${page.clientWidth}`);
}
const content = document.getElementById("content");
const main = document.getElementById("main");
for (const el of content.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (!box.width) continue;
    const style = getComputedStyle(el);
    if (["auto", "scroll"].includes(style.overflowX) && el.scrollWidth > el.clientWidth + 1) {
        problems.push(`${name(el)} scrolls sideways: ${el.scrollWidth} > ${el.clientWidth}`);
    }
    // A block of content (not the admin's own bars) within its fieldset or module, or
    // else within the window's main area.
    if (!el.matches("pre, table, svg, img, p, ul, dl")) continue;
    const outer = el.parentElement.closest("fieldset, .module") || main;
    const right = outer.getBoundingClientRect().right;
    if (box.right > right + 1 && style.position !== "absolute") {
        const by = `${Math.round(box.right)} > ${Math.round(right)}`;
        problems.push(`${name(el)} sticks out of ${name(outer)}: ${by}`);
    }
}
const buttons = document.querySelectorAll(".object-tools li, .rq-controls > *");
for (const button of buttons) {
    const a = button.getBoundingClientRect();
    if (!a.width) continue;
    for (const table of content.querySelectorAll("table")) {
        const b = table.getBoundingClientRect();
        if (a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom) {
            problems.push(`${name(button)} lies over ${name(table)}`);
        }
    }
}
// No blank tail: the page ends near its last thing a person can see (a table hidden
// for screen readers must not stretch it).
let bottom = window.innerHeight;
for (const el of document.body.querySelectorAll("*")) {
    const box = el.getBoundingClientRect();
    if (box.width > 1 && box.height > 1 && !el.closest(".visually-hidden")) {
        bottom = Math.max(bottom, box.bottom + window.scrollY);
    }
}
if (page.scrollHeight > bottom + 100) {
    const content = Math.round(bottom);
    problems.push(`a blank tail: the page is ${page.scrollHeight} px, its content ${content}`);
}
return problems;
"""


def layout_problems(browser: Chrome) -> list[str]:
    """Return what keeps the page from fitting its window (LAYOUT_PROBLEMS); [] if nothing."""
    problems: list[str] = browser.execute_script(LAYOUT_PROBLEMS)
    return problems
