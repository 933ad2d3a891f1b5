"""The users of bench.load, for Locust: enqueue-and-poll users, bulk users, and stream users
who follow a job's events (polling it while a stream is refused).

Run by bench.load (``locust -f bench/locustfile.py --headless ...``), which passes the
users' tokens in ``LOAD_TOKENS`` (a file of one token a line), how many of each kind in
``LOAD_POLLERS``, ``LOAD_BULKERS``, ``LOAD_STREAMERS``, and where to write the status codes
and accepted jobs in ``LOAD_REPORT`` (JSON, at the end).
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections import Counter
from pathlib import Path
from typing import Any

from locust import HttpUser, between, events, task

API = "/ratequeue/"
TOKENS = itertools.cycle(Path(os.environ["LOAD_TOKENS"]).read_text().split())
CODES: Counter[str] = Counter()
ACCEPTED: list[str] = []
FINAL = {"complete", "failed", "canceled"}
# A stream is held this long before its user closes it and opens another.
HOLD = float(os.environ.get("LOAD_HOLD", "20"))


@events.request.add_listener
def count(name: str, response: Any, exception: Any, **kwargs: Any) -> None:
    code = getattr(response, "status_code", None) or type(exception).__name__
    CODES[f"{name} {code}"] += 1


@events.quitting.add_listener
def report(environment: Any, **kwargs: Any) -> None:
    Path(os.environ["LOAD_REPORT"]).write_text(json.dumps({"codes": CODES, "accepted": ACCEPTED}))


class ApiUser(HttpUser):
    abstract = True

    def on_start(self) -> None:
        self.client.headers["Authorization"] = f"Token {next(TOKENS)}"

    def enqueue(self, function: str, **body: Any) -> str | None:
        body = {"function": function, **body}
        with self.client.post(
            f"{API}jobs/", json=body, name="POST jobs/", catch_response=True
        ) as response:
            if response.status_code != 201:
                response.failure(f"{response.status_code}")
                return None
            job_id = str(response.json()["id"])
            ACCEPTED.append(job_id)
            return job_id

    def poll(self, job_id: str, until: float) -> None:
        """Poll the job every half second until it ends or ``until`` (monotonic) passes."""
        while time.monotonic() < until:
            response = self.client.get(f"{API}jobs/{job_id}/", name="GET jobs/<id>/")
            if response.status_code == 200 and response.json()["status"] in FINAL:
                return
            time.sleep(0.5)


class Poller(ApiUser):
    """Enqueue a job, and poll it until it ends."""

    fixed_count = int(os.environ.get("LOAD_POLLERS", "20"))
    wait_time = between(0.5, 1.5)

    @task
    def enqueue_and_poll(self) -> None:
        job_id = self.enqueue("bench.jobs.noop")
        if job_id is not None:
            self.poll(job_id, time.monotonic() + 20)


class Bulker(ApiUser):
    """Enqueue twenty jobs at once."""

    fixed_count = int(os.environ.get("LOAD_BULKERS", "2"))
    wait_time = between(2, 4)

    @task
    def bulk(self) -> None:
        items = [{"args": []} for _ in range(20)]
        with self.client.post(
            f"{API}jobs/bulk/",
            json={"function": "bench.jobs.noop", "items": items},
            name="POST jobs/bulk/",
            catch_response=True,
        ) as response:
            if response.status_code != 201:
                response.failure(f"{response.status_code}")
                return
            ACCEPTED.extend(str(job["id"]) for job in response.json())


class Streamer(ApiUser):
    """Enqueue a talking job and follow its events; poll it while a stream is refused."""

    fixed_count = int(os.environ.get("LOAD_STREAMERS", "50"))
    wait_time = between(0.5, 1)

    @task
    def follow(self) -> None:
        job_id = self.enqueue("bench.ratequeue_jobs.talk", args=[60, 0.5])
        if job_id is None:
            return
        until = time.monotonic() + HOLD
        while time.monotonic() < until:
            # The time to the headers is the request's: a refusal (429) comes at once.
            with self.client.get(
                f"{API}jobs/{job_id}/events/",
                headers={"Accept": "text/event-stream"},
                name="GET jobs/<id>/events/",
                stream=True,
                catch_response=True,
            ) as response:
                if response.status_code in (200, 429):
                    response.success()  # a refusal as designed: poll meanwhile
                else:
                    response.failure(f"{response.status_code}")
            if response.status_code == 429:
                wait = float(response.headers.get("Retry-After", "1"))
                self.poll(job_id, min(until, time.monotonic() + max(wait, 5)))
                continue
            if response.status_code == 200:
                for _line in response.iter_lines():
                    if time.monotonic() >= until:
                        break
            response.close()
            return
