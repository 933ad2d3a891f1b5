"""ratequeue.js in a real browser against the HTTP API of a live server: what a page's
script gets back from each call, with a real cluster where jobs must run."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from django_ratequeue.models import Job
from example_project.demo.accounts import create_demo_accounts
from example_project.demo.jobs import ASK_COST, made_up_answer
from tests.browser.pages import log_in

if TYPE_CHECKING:
    from selenium.webdriver import Chrome

ASK = "example_project.demo.jobs.ask_model"

# Runs the body of an async function of `rq` (the module) in the page; answers
# {value} or {error: the rejection's name, message and fields}.
RUN = """
const [body, done] = [arguments[0], arguments[arguments.length - 1]];
const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor;
import("/static/ratequeue/ratequeue.js")
  .then((rq) => new AsyncFunction("rq", body)(rq))
  .then(
    (value) => done({ value }),
    (error) => done({ error: {
      name: error.name, message: error.message, status: error.status ?? null,
      retryAfter: error.retryAfter ?? null, error: error.error ?? null,
    } }),
  );
"""


def script_runner(driver: Chrome) -> Callable[[str], Any]:
    """``run(body)``: runs ``body`` in the driver's page and returns what it resolved
    with, or ``{"error": ...}``."""
    driver.set_script_timeout(60)

    def run(body: str) -> Any:
        outcome = driver.execute_async_script(RUN, body)
        return outcome if "error" in outcome else outcome["value"]

    return run


@pytest.fixture
def page(live_server: Any, browser: Callable[..., Chrome]) -> Callable[[str], Any]:
    """Runs script in alice's page (see :func:`script_runner`)."""
    create_demo_accounts()
    driver = browser()
    log_in(driver, live_server, "alice")
    return script_runner(driver)


def test_refusals_reject_with_the_status_and_the_servers_reason(
    page: Callable[[str], Any],
) -> None:
    unexposed = page('return await rq.enqueue("os.system", {args: ["true"]});')
    bad_arguments = page(f'return await rq.enqueue("{ASK}", {{args: [1, 2]}});')
    no_such_job = page('return await rq.job("no-such-job").get();')
    no_such_limit = page('return await rq.rateLimit("failed_logins").value();')

    assert unexposed["error"]["name"] == "RateQueueError"
    assert unexposed["error"]["status"] == 404
    assert unexposed["error"]["message"].startswith("POST http://")
    reason = "/ratequeue/jobs/: 404 Not Found: There is no such function to enqueue."
    assert reason in unexposed["error"]["message"]
    assert bad_arguments["error"]["status"] == 400
    assert "args: The arguments do not fit the function" in bad_arguments["error"]["message"]
    assert no_such_job["error"]["status"] == 404
    assert no_such_limit["error"]["status"] == 404
    assert not Job.objects.exists()


def test_posts_carry_the_csrf_token(page: Callable[[str], Any]) -> None:
    forged = page(
        f"""const client = new rq.Client({{csrfToken: "not-the-token"}});
        return await client.enqueue("{ASK}", {{args: ["hi"]}});"""
    )
    created = page(f'return await rq.enqueue("{ASK}", {{args: ["hi"]}});')

    assert forged["error"]["status"] == 403
    assert "CSRF" in forged["error"]["message"]
    assert Job.objects.get().pk == created["id"]


def test_the_budget_is_read_and_a_spent_one_is_a_429_with_retry_after(
    page: Callable[[str], Any],
) -> None:
    before = page(f"return await rq.rateLimit('llm_user_tokens').value({{count: {ASK_COST}}});")
    asked = [page(f'return await rq.enqueue("{ASK}", {{args: ["q{n}"]}});') for n in range(5)]
    spent = page(f'return await rq.enqueue("{ASK}", {{args: ["one too many"]}});')
    after = page(f"return await rq.rateLimit('llm_user_tokens').value({{count: {ASK_COST}}});")

    assert (before["value"], before["capacity"], before["retry_at"]) == (200, 200, None)
    assert all(job["status"] for job in asked)
    assert spent["error"]["status"] == 429 and spent["error"]["retryAfter"] > 0
    assert after["value"] < ASK_COST and after["retry_at"] is not None
    assert Job.objects.count() == 5


@pytest.mark.parametrize("transport", ["auto", "poll"])
def test_subscribe_delivers_the_jobs_events_and_result_resolves(
    page: Callable[[str], Any], cluster: Any, transport: str
) -> None:
    cluster()
    prompt = "How are the words sent?"

    outcome = page(
        f"""const {{ id }} = await rq.enqueue("{ASK}", {{args: [{json.dumps(prompt)}]}});
        const events = await new Promise((resolve) => {{
            const seen = [];
            rq.job(id).subscribe((event) => {{
                seen.push(event);
                if (event.type === "result" || event.type === "error") resolve(seen);
            }}, {{transport: "{transport}"}});
        }});
        return {{events, result: await rq.job(id).result()}};"""
    )

    answer = made_up_answer(prompt)
    assert outcome["result"] == answer
    events = outcome["events"]
    assert events[-1] == {"type": "result", "data": {"result": answer}}
    statuses = [e["data"]["status"] for e in events if e["type"] == "status"]
    assert statuses[-1] == "complete" and len(set(statuses)) == len(statuses)  # each once
    progress = [e["data"] for e in events if e["type"] == "progress"]
    assert progress[-1] == {"done": len(answer.split(" ")), "total": len(answer.split(" "))}
    # Streamed or polled, every chunk of the answer once, in order, before the result.
    output = [e["data"] for e in events if e["type"] == "output"]
    assert "".join(chunk["text"] for chunk in output) == answer
    indices = [chunk["index"] for chunk in output]
    assert indices == list(range(1, len(indices) + 1))
    if transport == "auto":  # streamed: every status
        assert statuses[-2:] == ["running", "complete"]


def test_result_rejects_with_the_jobs_error_when_it_fails_or_is_canceled(
    page: Callable[[str], Any], cluster: Any
) -> None:
    cluster()

    failed = page(
        f"""const {{ id }} = await rq.enqueue("{ASK}", {{args: ["   "]}});
        return await rq.job(id).result();"""
    )
    canceled = page(
        f"""const later = {{args: ["later"], options: {{run_after: 3600}}}};
        const {{ id }} = await rq.enqueue("{ASK}", later);
        const waiting = rq.job(id).result();
        await rq.job(id).cancel();
        return await waiting;"""
    )
    timed_out = page(
        f"""const later = {{args: ["later"], options: {{run_after: 3600}}}};
        const {{ id }} = await rq.enqueue("{ASK}", later);
        return await rq.job(id).result({{signal: AbortSignal.timeout(100)}});"""
    )

    assert failed["error"]["name"] == "JobError" and failed["error"]["status"] == "failed"
    assert "the prompt is empty" in failed["error"]["error"]
    assert canceled["error"]["name"] == "JobError" and canceled["error"]["status"] == "canceled"
    assert timed_out["error"]["name"] == "TimeoutError"


def test_a_client_whose_stream_is_refused_polls_with_its_token(
    live_server: Any, cluster: Any, browser: Callable[..., Chrome]
) -> None:
    """EventSource cannot send the Authorization header: the stream is refused (no
    session), and the client follows the job by polling, with the header."""
    cluster()
    create_demo_accounts()
    token = Token.objects.create(user=User.objects.get(username="alice"))
    driver = browser()
    driver.get(f"{live_server.url}/")  # not logged in
    run = script_runner(driver)

    outcome = run(
        f"""const client = new rq.Client({{headers: {{Authorization: "Token {token.key}"}}}});
        const {{ id }} = await client.enqueue("{ASK}", {{args: ["By token?"]}});
        const types = [];
        const result = await new Promise((resolve, reject) => {{
            client.job(id).subscribe((event) => {{
                types.push(event.type);
                if (event.type === "result") resolve(event.data.result);
            }}, {{onError: reject}});
        }});
        return {{types, result}};"""
    )

    assert outcome["result"] == made_up_answer("By token?")
    assert {"progress", "output"} <= set(outcome["types"])


@pytest.mark.parametrize("transport", ["auto", "poll"])
def test_a_batch_is_followed_to_its_outcome(
    page: Callable[[str], Any], cluster: Any, transport: str
) -> None:
    cluster()
    outcome = page(
        f"""const jobs = await rq.enqueueMany(
            "{ASK}", [{{args: ["one?"]}}, {{args: ["two?"]}}], {{batch: true}});
        const batch = rq.batch(jobs[0].batch);
        const progress = [];
        const finished = await new Promise((resolve, reject) => batch.subscribe({{
            onProgress: (seen) => progress.push(seen), onFinished: resolve,
            onError: reject, transport: "{transport}"}}));
        const info = await batch.get();
        return {{ids: jobs.map((job) => job.id), progress, finished,
                 result: await batch.result(), info}};"""
    )
    ids = sorted(outcome["ids"])
    assert sorted(outcome["finished"]["succeeded"]) == ids
    assert outcome["result"] == outcome["finished"]
    assert outcome["info"]["state"] == "finished"
    assert outcome["progress"][-1]["done"] == outcome["progress"][-1]["total"] == 2
    missing = page('return await rq.batch("no-such-batch").get();')
    assert missing["error"]["status"] == 404
