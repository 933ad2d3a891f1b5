"""What installing the package brings: DRF is an extra, psycopg is not its binary build."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def project() -> dict[str, object]:
    with open(ROOT / "pyproject.toml", "rb") as file:
        return tomllib.load(file)["project"]  # type: ignore[no-any-return]


def test_drf_is_an_extra_and_psycopg_is_not_its_binary_build() -> None:
    meta = project()
    required = meta["dependencies"]
    assert isinstance(required, list)
    assert not [r for r in required if r.lower().startswith("djangorestframework")]
    # 3.2: the waiters' notifies(timeout=...).
    assert [r for r in required if r.startswith("psycopg")] == ["psycopg>=3.2"]
    extras = meta["optional-dependencies"]
    assert isinstance(extras, dict)
    assert extras["drf"] == ["djangorestframework>=3.15", "uritemplate>=4.1"]
    assert extras["binary"] == ["psycopg[binary]>=3.2"]
    assert not [r for r in required if r.startswith("prometheus")]
    assert extras["prometheus"] == ["prometheus-client>=0.20"]
    # The tests and the example project need them all, on a fresh machine.
    assert extras["otel"] == ["opentelemetry-api>=1.25", "opentelemetry-sdk>=1.25"]
    assert not [r for r in required if r.startswith("opentelemetry")]
    assert "django-ratequeue[drf,binary,prometheus,otel,docs]" in extras["dev"]


def run_without_drf(
    code: str, missing: str = "rest_framework"
) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where ``missing`` (DRF) cannot be imported, with
    a minimal project (the app, no DRF) set up."""
    prelude = (
        f"import sys; sys.modules[{missing!r}] = None\n"
        "import django; from django.conf import settings\n"
        "settings.configure(\n"
        "    INSTALLED_APPS=['django.contrib.admin', 'django.contrib.auth',\n"
        "        'django.contrib.contenttypes', 'django.contrib.sessions',\n"
        "        'django.contrib.messages', 'django_q', 'django_ratequeue'],\n"
        "    DATABASES={'default': {'ENGINE': 'django.db.backends.sqlite3',\n"
        "        'NAME': ':memory:', 'OPTIONS': {'transaction_mode': 'IMMEDIATE'}}},\n"
        "    Q_CLUSTER={'name': 'test', 'orm': 'default'},\n"
        "    SILENCED_SYSTEM_CHECKS=['admin.E403', 'admin.E408', 'admin.E409', 'admin.E410'],\n"
        ")\n"
        "django.setup()\n"
    )
    return subprocess.run(
        [sys.executable, "-c", prelude + code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_the_package_works_without_drf() -> None:
    """Every module but the DRF parts imports, and the checks pass."""
    code = (
        "import importlib, pkgutil, django_ratequeue\n"
        "NEED_DRF = ('django_ratequeue.api', 'django_ratequeue.urls',\n"
        "    'django_ratequeue.contrib.drf')\n"
        "def skip(name):\n"
        "    if not name.startswith(NEED_DRF):\n"
        "        raise\n"
        "walk = pkgutil.walk_packages(django_ratequeue.__path__, 'django_ratequeue.', skip)\n"
        "for info in walk:\n"
        "    if '.migrations' not in info.name and not info.name.startswith(NEED_DRF):\n"
        "        importlib.import_module(info.name)\n"
        "from django.core.management import call_command; call_command('check')\n"
    )
    done = run_without_drf(code)
    assert done.returncode == 0, done.stderr


@pytest.mark.parametrize("module", ["django_ratequeue.urls", "django_ratequeue.contrib.drf"])
def test_the_drf_parts_without_drf_say_what_to_install(module: str) -> None:
    done = run_without_drf(f"import {module}")
    assert done.returncode == 1
    assert "ImproperlyConfigured" in done.stderr
    assert "pip install 'django-ratequeue[drf]'" in done.stderr


def test_the_metrics_without_prometheus_client_say_what_to_install() -> None:
    done = run_without_drf("import django_ratequeue.contrib.prometheus", "prometheus_client")
    assert done.returncode == 1
    assert "ImproperlyConfigured" in done.stderr
    assert "pip install 'django-ratequeue[prometheus]'" in done.stderr


def test_the_package_works_without_opentelemetry() -> None:
    """Enqueues and attempts make no span and store no trace context without the extra."""
    done = run_without_drf(
        "from django_ratequeue import tracing\n"
        "assert not tracing.enabled() and tracing.current_traceparent() == ''\n"
        "with tracing.enqueue_span('f', 'q'):\n"
        "    pass\n"
        "import contextvars\n"
        "span = tracing.start_attempt('', {}, contextvars.copy_context())\n"
        "tracing.end_attempt(span, 'failed', 'boom')\n"
        "assert span is None\n",
        "opentelemetry",
    )
    assert done.returncode == 0, done.stderr
