"""Headless Chromium for the browser tests: Debian's ``chromium`` driven by its
``chromedriver`` through Selenium, against pytest-django's ``live_server``.

Every test here is marked ``browser`` and skipped, saying why, when the browser or
Selenium is missing (``scripts/test.sh`` installs the browser when it runs as root). A
failing test leaves a screenshot, the page's HTML and the browser's console in its
``tmp_path``; the path is printed with the failure.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from pathlib import Path

import pytest

CHROMIUM = Path("/usr/bin/chromium")
CHROMEDRIVER = Path("/usr/bin/chromedriver")

try:
    from selenium.webdriver import Chrome, ChromeOptions
    from selenium.webdriver.chrome.service import Service
except ImportError:  # the dev extra is not installed
    MISSING: str | None = "selenium is not installed (pip install -e '.[dev]')"
else:
    MISSING = (
        None
        if CHROMIUM.exists() and CHROMEDRIVER.exists()
        else f"no headless Chromium: {CHROMIUM} and {CHROMEDRIVER} are needed "
        "(apt-get install chromium chromium-driver)"
    )

call_reports = pytest.StashKey[pytest.TestReport]()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(item.path).parents:
            item.add_marker(pytest.mark.browser)
            if MISSING:
                item.add_marker(pytest.mark.skip(reason=MISSING))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    if report.when == "call":
        item.stash[call_reports] = report
    return report


@pytest.fixture(autouse=True, scope="module")
def live_server_threads_stop(background_threads_stop: None) -> None:
    """The live server runs in this process: its event streams' watcher too."""


@pytest.fixture
def browser(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Callable[..., Chrome]]:
    """``browser(event_source=True)`` opens a new headless Chromium window with its own
    cookies (one per user); ``event_source=False`` takes ``EventSource`` away from its
    pages, as in a browser that has none."""
    opened: list[Chrome] = []

    def open_browser(event_source: bool = True) -> Chrome:
        options = ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
                         "--disable-gpu", "--window-size=1200,1700"):  # fmt: skip
            options.add_argument(argument)
        options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
        driver = Chrome(options=options, service=Service(str(CHROMEDRIVER)))
        opened.append(driver)
        if not event_source:
            driver.execute_cdp_cmd(
                "Page.addScriptToEvaluateOnNewDocument", {"source": "delete window.EventSource;"}
            )
        return driver

    yield open_browser
    report = request.node.stash.get(call_reports, None)
    for number, driver in enumerate(opened):
        if report is not None and report.failed:
            keep_evidence(driver, tmp_path / f"browser-{number}")
        driver.quit()


def keep_evidence(driver: Chrome, stem: Path) -> None:
    """Save what the browser showed when the test failed, and say where."""
    driver.save_screenshot(str(stem.with_suffix(".png")))
    stem.with_suffix(".html").write_text(driver.page_source)
    console = "\n".join(f"{e['level']} {e['message']}" for e in driver.get_log("browser"))
    stem.with_suffix(".console.txt").write_text(console)
    print(f"browser evidence: {stem}.png, .html and .console.txt (url {driver.current_url})")
