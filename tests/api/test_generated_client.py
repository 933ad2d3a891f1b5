"""A client generated from the live OpenAPI schema works against the live server.

openapi-python-client (a well-kept generator) writes a Python package from ``GET schema/``;
the test imports it and drives a user's and a remote worker's calls through it: every
answer the server gives must parse into the models the schema promised, errors included."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from django_ratequeue import enqueue
from django_ratequeue.engine.workerkeys import create_key
from tests.api.conftest import API
from tests.remote.conftest import REMOTE_QUEUES
from tests.remote.test_protocol import dispatch

PACKAGE = "ratequeue_generated_client"


@pytest.fixture
def generated(api: Any, tmp_path: Path) -> Iterator[ModuleType]:
    """Generate the client from the live schema, and import it."""
    schema = api.get(f"{API}schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    (tmp_path / "schema.json").write_bytes(schema.content)
    binaries = str(Path(sys.executable).parent)  # the generator's own ruff, beside it
    made = subprocess.run(
        [
            os.path.join(binaries, "openapi-python-client"),
            *("generate", "--path", "schema.json", "--meta", "none"),
            *("--output-path", PACKAGE),
        ],
        cwd=tmp_path,
        env={**os.environ, "PATH": binaries + os.pathsep + os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert made.returncode == 0, made.stdout + made.stderr
    assert "Unable to" not in made.stdout and "Cannot parse" not in made.stdout, made.stdout
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module(PACKAGE)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [name for name in sys.modules if name.startswith(PACKAGE)]:
            del sys.modules[name]


def part(package: ModuleType, name: str) -> Any:
    return importlib.import_module(f"{package.__name__}.{name}")


@pytest.mark.django_db(transaction=True)
def test_a_generated_client_enqueues_reads_and_cancels(
    generated: ModuleType, live_server: Any, ada: User, bob: User
) -> None:
    models = part(generated, "models")
    client = generated.AuthenticatedClient(
        base_url=live_server.url, token=Token.objects.create(user=ada).key, prefix="Token"
    )
    body = models.Enqueue(function="tests.api.jobs.greet", args=["Ada"])
    created = part(generated, "api.ratequeue.enqueue_job").sync_detailed(client=client, body=body)
    assert created.status_code == 201, created.content
    assert isinstance(created.parsed, models.Job)
    job_id = created.parsed.id
    read = part(generated, "api.ratequeue.get_job").sync(job_id, client=client)
    assert isinstance(read, models.JobDetail) and read.id == job_id
    assert read.eta.basis is not None
    canceled = part(generated, "api.ratequeue.cancel_job").sync_detailed(job_id, client=client)
    assert canceled.status_code == 202 and isinstance(canceled.parsed, models.Job)
    # Another user's job looks like none: a 404 in the one error shape.
    stranger = generated.AuthenticatedClient(
        base_url=live_server.url, token=Token.objects.create(user=bob).key, prefix="Token"
    )
    hidden = part(generated, "api.ratequeue.get_job").sync_detailed(job_id, client=stranger)
    assert hidden.status_code == 404 and isinstance(hidden.parsed, models.Error)
    refused = part(generated, "api.ratequeue.enqueue_job").sync_detailed(
        client=client, body=models.Enqueue(function="os.system", args=["true"])
    )
    assert refused.status_code == 404 and isinstance(refused.parsed, models.Error)


@pytest.mark.django_db(transaction=True)
def test_a_generated_client_claims_and_completes_as_a_remote_worker(
    generated: ModuleType, live_server: Any, settings: Any
) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "QUEUES": REMOTE_QUEUES}
    models = part(generated, "models")
    key = create_key("generated client", ["gpu"])[1]
    worker = generated.AuthenticatedClient(base_url=live_server.url, token=key, prefix="Api-Key")
    handle = enqueue("tests.queue.jobs.add", args=[2, 3], queue="gpu", retries=0)
    dispatch()
    claim = part(generated, "api.ratequeue.claim_attempts").sync_detailed(
        client=worker, body=models.Claim(worker="gen-1", max_=1)
    )
    assert claim.status_code == 200, claim.content
    assert isinstance(claim.parsed, models.ClaimAnswer)
    (attempt,) = claim.parsed.attempts
    assert attempt.job_id == handle.id
    done = part(generated, "api.ratequeue.complete_attempt").sync_detailed(
        attempt.id, client=worker, body=models.Complete(result=5)
    )
    assert done.status_code == 200, done.content
    assert isinstance(done.parsed, models.ReportTaken)
    again = part(generated, "api.ratequeue.heartbeat_attempt").sync_detailed(
        attempt.id, client=worker
    )
    assert again.status_code == 409 and isinstance(again.parsed, models.Error)
