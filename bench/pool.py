"""Worker processes, started once, that begin each measurement at the same instant.

Spawning and setting up Django costs far more than a measurement lasts on a small machine,
so the workers live for the whole run. For each measurement every worker builds its decider
and warms its connections on a throw-away key, reports ready, and then all start at one
wall-clock instant the parent hands out (the start barrier).
"""

from __future__ import annotations

import multiprocessing
import os
import time
import traceback
from dataclasses import dataclass
from multiprocessing.connection import Connection
from types import TracebackType

from bench.contenders import Decider, build_decider

# Time between the last worker reporting ready and the common start.
START_DELAY = 0.05


@dataclass(frozen=True)
class Task:
    """What one worker measures: for ``seconds``, or for a fixed number of ``tries``."""

    contender: str
    key: str
    limit: int
    shards: int = 1
    seconds: float | None = None
    tries: int | None = None


@dataclass(frozen=True)
class Tally:
    decisions: int
    admitted: int
    elapsed: float


@dataclass(frozen=True)
class Failure:
    traceback: str


class MeasurementFailed(Exception):
    pass


class Pool:
    def __init__(self, size: int) -> None:
        context = multiprocessing.get_context("spawn")
        self._connections: list[Connection] = []
        self._processes = []
        for _ in range(size):
            parent_end, child_end = context.Pipe()
            process = context.Process(target=serve, args=(child_end,), daemon=True)
            process.start()
            self._connections.append(parent_end)
            self._processes.append(process)

    def run(self, tasks: list[Task]) -> list[Tally]:
        """Run one task per worker, all starting together; raise if any worker failed."""
        connections = self._connections[: len(tasks)]
        for connection, task in zip(connections, tasks, strict=True):
            connection.send(task)
        failures = [
            answer
            for connection in connections
            if isinstance(answer := connection.recv(), Failure)
        ]
        start_at = time.time() + START_DELAY
        for connection in connections:
            connection.send(start_at)
        answers = [connection.recv() for connection in connections]
        failures += [answer for answer in answers if isinstance(answer, Failure)]
        if failures:
            raise MeasurementFailed(failures[0].traceback)
        return answers

    def close(self) -> None:
        for connection in self._connections:
            connection.send(None)
        for process in self._processes:
            process.join(timeout=10)

    def __enter__(self) -> Pool:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def serve(connection: Connection) -> None:
    """A worker's life: set up Django once, then measure task after task."""
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
    import django

    django.setup()

    while (task := connection.recv()) is not None:
        try:
            build_decider(task.contender, f"{task.key}:warm-up", task.limit, task.shards)()
            decide = build_decider(task.contender, task.key, task.limit, task.shards)
        except Exception:
            connection.send(Failure(traceback.format_exc()))
            connection.recv()  # the start signal, which a failed worker lets pass
            connection.send(Failure("see the first failure"))
            continue
        connection.send("ready")
        start_at = connection.recv()
        time.sleep(max(0.0, start_at - time.time()))
        try:
            connection.send(measure(decide, task, start_at))
        except Exception:
            connection.send(Failure(traceback.format_exc()))


def measure(decide: Decider, task: Task, start_at: float) -> Tally:
    decisions = admitted = 0
    if task.tries is not None:
        for _ in range(task.tries):
            admitted += decide()
        decisions = task.tries
    else:
        assert task.seconds is not None
        end_at = start_at + task.seconds
        while time.time() < end_at:
            admitted += decide()
            decisions += 1
    return Tally(decisions, admitted, time.time() - start_at)
