import pytest
from django.db import connection


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip ``@pytest.mark.postgres_only`` tests when the suite runs on SQLite."""
    from django.conf import settings

    if settings.DATABASES["default"]["ENGINE"].endswith("postgresql"):
        return
    skip = pytest.mark.skip(reason="needs PostgreSQL (row locks across processes)")
    for item in items:
        if "postgres_only" in item.keywords:
            item.add_marker(skip)


def pytest_report_header() -> str:
    from django.conf import settings

    db = settings.DATABASES["default"]
    return f"ratequeue database: {db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}"
