"""procrastinate, the PostgreSQL-native async queue, as a peer: its app, its tasks, its database.

It gets a database of its own on the same PostgreSQL server (``BENCH_PROCRASTINATE_DSN``,
default ``postgres://root@127.0.0.1:5432/bench_procrastinate``), created and given
procrastinate's schema by :func:`prepare`, dropped by :func:`drop`. Its workers are
``python -m procrastinate --app=bench.procrastinate_app.app worker`` processes
(:func:`worker_command`). Imports of procrastinate happen here only: the benchmarks run
without it, reporting it as not installed.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import procrastinate

from bench import jobs

DSN_ENV = "BENCH_PROCRASTINATE_DSN"
DEFAULT_DSN = "postgres://root@127.0.0.1:5432/bench_procrastinate"
APP = "bench.procrastinate_app.app"


def dsn() -> str:
    return os.environ.get(DSN_ENV, DEFAULT_DSN)


app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn()))


@app.task(name="noop")
def noop() -> None:
    """The no-op of the throughput runs."""


@app.task(name="pause")
def pause(ms: float) -> None:
    """The short job of the steady-traffic runs (bench.steady)."""
    jobs.pause(ms)


@app.task(name="wait_on_network")
def wait_on_network(port: int, ms: int) -> None:
    """The sync IO-bound job (a thread of the worker's pool)."""
    jobs.wait_on_network(port, ms)


@app.task(name="await_on_network")
async def await_on_network(port: int, ms: int) -> None:
    """The async IO-bound job (the worker's event loop)."""
    await jobs.await_on_network(port, ms)


def _connect(database: str | None = None) -> Any:
    import psycopg
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(dsn())
    if database is not None:
        params["dbname"] = database
    return psycopg.connect(make_conninfo(**params), autocommit=True)


def database_name() -> str:
    from psycopg.conninfo import conninfo_to_dict

    return str(conninfo_to_dict(dsn())["dbname"])


def prepare() -> str:
    """Create procrastinate's database afresh and apply its schema; its name."""
    from psycopg import sql

    name = database_name()
    with _connect("postgres") as connection:
        connection.execute(sql.SQL("DROP DATABASE IF EXISTS {}").format(sql.Identifier(name)))
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    app.open()  # its sync connector's pool (idempotent), for the schema and for defer()
    app.schema_manager.apply_schema()
    return name


def drop() -> None:
    """Close this process's pool and drop procrastinate's database."""
    from psycopg import sql

    app.close()
    with _connect("postgres") as connection:
        connection.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(
                sql.Identifier(database_name())
            )
        )


def execute(query: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
    """Run ``query`` on procrastinate's database, in a connection of its own."""
    with _connect() as connection, connection.cursor() as cursor:
        cursor.execute(query, params)  # type: ignore[arg-type]
        return cursor.fetchall() if cursor.description else []


def empty() -> None:
    """Empty its jobs and events (between scenarios; no worker running)."""
    execute("TRUNCATE procrastinate_jobs, procrastinate_events RESTART IDENTITY CASCADE")


def analyze() -> None:
    """Autovacuum may be off (it is on the shared server): give the planner its figures."""
    execute("ANALYZE procrastinate_jobs, procrastinate_events")


class Monitor:
    """One connection kept open to read how many jobs ended and how many are running."""

    def __init__(self) -> None:
        self.connection = _connect()

    def counter(self, task: str, status: str) -> Callable[[], int]:
        def count() -> int:
            row = self.connection.execute(
                "SELECT count(*) FROM procrastinate_jobs WHERE task_name = %s AND status = %s",
                [task, status],
            ).fetchone()
            return int(row[0]) if row else 0

        return count

    def connections(self) -> int:
        """Connections held to procrastinate's database, this one left out."""
        row = self.connection.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()
        return int(row[0]) if row else 0

    def close(self) -> None:
        self.connection.close()


def worker_command(concurrency: int | None = None) -> list[str]:
    """A worker process, at procrastinate's defaults unless ``concurrency`` is given."""
    command = ["-m", "procrastinate", f"--app={APP}", "worker"]
    if concurrency is not None:
        command += ["--concurrency", str(concurrency)]
    return command
