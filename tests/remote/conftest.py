"""Remote workers' fixtures: a remote queue, a worker key, an HTTP client with the key."""

from __future__ import annotations

from typing import Any

import pytest
from rest_framework.test import APIClient

from django_ratequeue.engine.models import WorkerKey
from django_ratequeue.engine.workerkeys import create_key

API = "/ratequeue/workers/"
# "gpu" and "cpu" run only on remote workers; "local" on the cluster's runners.
REMOTE_QUEUES = {
    "gpu": {"max_concurrency": 8, "remote": True},
    "cpu": {"max_concurrency": 8, "remote": True},
}


@pytest.fixture
def remote_queues(settings: Any) -> None:
    settings.RATEQUEUE = {**settings.RATEQUEUE, "QUEUES": REMOTE_QUEUES}


@pytest.fixture
def gpu_key(db: None) -> tuple[WorkerKey, str]:
    return create_key("gpu box", ["gpu"])


def keyed(key: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Api-Key {key}")
    return client


@pytest.fixture
def worker(gpu_key: tuple[WorkerKey, str]) -> APIClient:
    return keyed(gpu_key[1])
