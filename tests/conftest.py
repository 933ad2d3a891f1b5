import pytest
from django.db import connection


@pytest.fixture
def on_postgres() -> bool:
    return connection.vendor == "postgresql"


def pytest_report_header() -> str:
    from django.conf import settings

    db = settings.DATABASES["default"]
    return f"ratequeue database: {db['ENGINE'].rsplit('.', 1)[-1]} {db['NAME']}"
