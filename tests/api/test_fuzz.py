"""Schemathesis over the live schema: every operation, users' and workers', then its
stateful phase, against a live server; zero failures of its checks (server errors, answers
and statuses the schema does not state, content types, valid data refused, invalid data
taken). Deterministic (``derandomize``), a bounded number of cases per operation.
``-m "not fuzz"`` leaves it out."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import requests
import schemathesis
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token
from schemathesis.config import HealthCheck
from schemathesis.engine import events

from django_ratequeue import enqueue_many
from django_ratequeue.api import batchevents, sse
from django_ratequeue.engine.optionvalues import parse_start_at
from django_ratequeue.engine.workerkeys import create_key
from tests.conftest import wait_for_background_threads
from tests.queue.steps import leading_loop

pytestmark = [pytest.mark.fuzz, pytest.mark.django_db(transaction=True)]

# Cases per operation (and steps of the stateful phase): a few minutes in all, per database.
EXAMPLES = 30
STEPS = 6
CHECKS = [
    "not_a_server_error",
    "response_schema_conformance",
    "status_code_conformance",
    "content_type_conformance",
    "positive_data_acceptance",
    "negative_data_rejection",
]
SEED = 35
CLAIM_WAIT = 0.05
WORKERS = "/ratequeue/workers/"


class Credentials:
    """The headers of the fuzzer's API user (a DRF token) and of its remote worker (a key)."""

    def __init__(self, user: str, worker: str) -> None:
        # Each request on a connection of its own: the live server's threads end with their
        # requests, and close their database connections (PostgreSQL drops no database in use).
        self.user = {"Authorization": f"Token {user}", "Connection": "close"}
        self.worker = {"Authorization": f"Api-Key {worker}", "Connection": "close"}


@pytest.fixture
def credentials(transactional_db: None, settings: Any, monkeypatch: Any) -> Iterator[Credentials]:
    """A user with a token, a worker key for the "remote" queue with work waiting in it.

    The API's throttles are off (the fuzzer's requests are many) and event streams last
    half a second, not five minutes."""
    settings.RATEQUEUE = {**settings.RATEQUEUE, "API_THROTTLES": {"enqueue": None, "read": None}}
    monkeypatch.setattr(sse, "LIFETIME", 0.5)
    monkeypatch.setattr(batchevents, "LIFETIME", 0.5)
    user = User.objects.create_user("fuzzer", password="secret")
    token = Token.objects.create(user=user)
    _row, key = create_key("fuzzer", ["remote"])
    enqueue_many("tests.api.jobs.greet", [[f"n{n}"] for n in range(20)], queue="remote")
    leading_loop().run(30)
    yield Credentials(token.key, key)
    wait_for_background_threads()  # a waiting claim's bell, the streams' watcher


def filter_case(context: Any, case: Any) -> bool:
    """Drop a valid case whose start_at is too far ahead: JSON Schema cannot bound a date by
    today's (the schema says it in words)."""
    options = case.body.get("options") if isinstance(case.body, dict) else None
    start_at = options.get("start_at") if isinstance(options, dict) else None
    if not isinstance(start_at, str) or not case.meta.generation.mode.is_positive:
        return True
    try:
        parse_start_at(start_at)
    except ValueError as error:
        return "too far ahead" not in str(error) and "out of range" not in str(error)
    return True


def map_case(context: Any, case: Any) -> Any:
    """Wait at most CLAIM_WAIT for work in a claim (``wait`` may be 60 s, for every case)."""
    body = case.body
    if case.path.endswith("/claim/") and isinstance(body, dict):
        wait = body.get("wait")
        if isinstance(wait, int | float) and not isinstance(wait, bool) and 0 < wait <= 60:
            body["wait"] = min(wait, CLAIM_WAIT)
    return case


@dataclass
class Run:
    """What Schemathesis found: failed checks and errors by operation, cases by phase."""

    failures: dict[str, list[str]] = field(default_factory=dict)
    cases: Counter[str] = field(default_factory=Counter)

    def take(self, event: events.EngineEvent) -> None:
        if isinstance(event, events.NonFatalError | events.FatalError):
            self.failures.setdefault(getattr(event, "label", "engine"), []).append(str(event.info))
        recorder = getattr(event, "recorder", None)
        if not isinstance(event, events.ScenarioFinished | events.FuzzScenarioFinished):
            return
        phase = getattr(event, "phase", "fuzzing")
        self.cases[str(getattr(phase, "value", phase))] += len(recorder.cases)
        for nodes in recorder.checks.values():
            for node in nodes:
                if node.failure_info is not None:
                    failure = node.failure_info.failure
                    self.failures.setdefault(recorder.label, []).append(
                        f"{node.name}: {failure.title}: {failure.message}\n"
                        f"{node.failure_info.code_sample}"
                    )

    def report(self) -> str:
        return "\n\n".join(
            f"{label}:\n" + "\n".join(sorted(set(messages)))
            for label, messages in self.failures.items()
        )


def configured(schema: Any, headers: dict[str, str], examples: int = EXAMPLES) -> Any:
    """Return ``schema`` set for a bounded, deterministic run with ``headers``."""
    schema.config.update(headers=headers, suppress_health_check=[HealthCheck.all])
    # No NUL in generated strings: the schema refuses it in text fields, but OpenAPI 3.0
    # cannot say so for the keys of a JSON value (args, kwargs, a result): it says it in words.
    schema.config.generation.update(
        max_examples=examples, deterministic=True, allow_x00=False, database="none"
    )
    schema.config.cache.enabled = False  # nothing kept from one run for the next
    schema.config.checks.update(included_check_names=CHECKS)
    # Methods an operation does not have are 405s for Django; no check here is about them.
    schema.config.phases.coverage.unexpected_methods = set()
    schema.config.phases.stateful.max_steps = STEPS
    schema.config.seed = SEED
    schema.hook(map_case)
    schema.hook(filter_case)
    return schema


def fuzz(run: Run, schema: Any) -> None:
    """Run Schemathesis's phases over ``schema``'s operations, into ``run``."""
    for event in schemathesis.engine.from_schema(schema).execute():
        run.take(event)


def live(url: str, headers: dict[str, str], path_regex: str) -> Any:
    """Return the live schema's operations under ``path_regex``, configured with ``headers``."""
    schema = schemathesis.openapi.from_url(url, headers=headers)
    return configured(schema.include(path_regex=path_regex), headers)


# An exception in one of Schemathesis's threads is a failure too, not a warning.
@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_the_fuzzer_finds_nothing(live_server: Any, credentials: Credentials) -> None:
    url = f"{live_server.url}/ratequeue/schema/"
    run = Run()
    fuzz(run, live(url, credentials.user, f"^(?!{WORKERS})"))
    fuzz(run, live(url, credentials.worker, f"^{WORKERS}"))

    print(f"Schemathesis ran {sum(run.cases.values())} cases: {dict(run.cases)}")
    assert not run.failures, run.report()
    assert set(run.cases) >= {"coverage", "fuzzing", "stateful"}, run.cases


def test_the_fuzzer_reports_an_answer_the_schema_does_not_state(
    live_server: Any, credentials: Credentials
) -> None:
    url = f"{live_server.url}/ratequeue/schema/"
    raw = requests.get(url, headers=credentials.user, timeout=30).json()
    getbatch = raw["paths"]["/ratequeue/batches/{batch_id}/"]["get"]
    del getbatch["responses"]["404"]  # the answer to a batch that does not exist
    schema = schemathesis.openapi.from_dict(raw).include(operation_id="getBatch")
    schema.config.update(base_url=live_server.url)
    run = Run()
    schema = configured(schema, credentials.user, examples=5)
    schema.config.phases.update(phases=["coverage", "fuzzing"])  # one operation: no links

    fuzz(run, schema)

    [(label, messages)] = run.failures.items()
    assert label == "GET /ratequeue/batches/{batch_id}/"
    assert any(message.startswith("status_code_conformance") for message in messages)
