import pytest
from django.core import checks
from django.core.management import call_command
from django.test import override_settings

# Django 6.1 checks JSONField support on SQLite by querying the database.
pytestmark = pytest.mark.django_db


def test_unknown_setting_is_reported() -> None:
    with override_settings(RATEQUEUE={"MAX_CONCURENCY": 3}):
        errors = checks.run_checks()
    assert [e.id for e in errors] == ["django_ratequeue.E001"]
    assert "MAX_CONCURENCY" in errors[0].msg


def test_default_settings_pass_checks() -> None:
    assert checks.run_checks() == []


def test_the_migrations_hold_every_model() -> None:
    call_command("makemigrations", "django_ratequeue", check=True, dry_run=True)
