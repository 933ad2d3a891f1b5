"""What every benchmark here shares: the database it prepares and the machine it reports."""

from __future__ import annotations

import os
import platform
from datetime import UTC, datetime
from importlib import metadata


def prepare_database() -> str:
    """Create the benchmark database if missing, migrate it, and name its server version."""
    from django.core.management import call_command
    from django.db import OperationalError, connection

    if connection.vendor == "postgresql":
        try:
            connection.ensure_connection()
        except OperationalError:
            with connection._nodb_cursor() as cursor:
                name = connection.ops.quote_name(connection.settings_dict["NAME"])
                cursor.execute(f"CREATE DATABASE {name}")
    call_command("migrate", verbosity=0)
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SHOW server_version")
            return f"PostgreSQL {cursor.fetchone()[0].split()[0]}"
        return f"{connection.vendor} {connection.Database.sqlite_version}"


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "not installed"


def machine_lines(database: str) -> list[str]:
    """The date, the machine and its load, and the database: the first lines of a report."""
    load = ", ".join(f"{value:.2f}" for value in os.getloadavg())
    return [
        f"date: {datetime.now(UTC):%Y-%m-%d %H:%M} UTC",
        f"machine: {os.cpu_count()} cores ({cpu_model()}), {platform.system()}, "
        f"load average {load}",
        f"database: {database}",
    ]
