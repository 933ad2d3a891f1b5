#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   ruff (lint + format), mypy, and lint-imports (the import layers in pyproject.toml);
#   pytest on SQLite and on PostgreSQL with the newest Django 5.2 on python3;
#   the same with Django 6.1 on Python 3.13 when such an interpreter is installed.
# Extra arguments go to every pytest run, e.g. `scripts/test.sh -k ratelimit -x`.
# PostgreSQL: role root, no password, 127.0.0.1:5432, database "ratequeue" (pytest-django
# creates test_ratequeue beside it); RATEQUEUE_TEST_POSTGRES_URL=postgres://... changes it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh

POSTGRES_URL=${RATEQUEUE_TEST_POSTGRES_URL:-postgres://root@127.0.0.1:5432/ratequeue}
failures=()

run_suite() {  # run_suite VENV LABEL
    local venv=$1 label=$2
    echo "==> pytest [$label, SQLite]"
    env -u DATABASE_URL "$venv/bin/pytest" "${@:3}" || failures+=("pytest $label SQLite")
    echo "==> pytest [$label, PostgreSQL]"
    DATABASE_URL=$POSTGRES_URL "$venv/bin/pytest" "${@:3}" || failures+=("pytest $label PostgreSQL")
}

ensure_postgres
skipped=""
ensure_chromium || skipped="the browser tests were SKIPPED: no /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)"

make_venv .venv python3 "Django>=5.2,<5.3"
echo "==> ruff check";      .venv/bin/ruff check . || failures+=("ruff check")
echo "==> ruff format";     .venv/bin/ruff format --check . || failures+=("ruff format")
echo "==> mypy";            .venv/bin/mypy || failures+=("mypy")
echo "==> lint-imports";    .venv/bin/lint-imports --no-logo || failures+=("lint-imports")
run_suite .venv "Django 5.2, $(python3 --version)" "$@"

py313=$(find_python 3.13)
if [ -n "$py313" ]; then
    make_venv .venv-django6 "$py313" "Django>=6.1,<6.2"
    run_suite .venv-django6 "Django 6.1, Python 3.13" "$@"
else
    echo "==> the Django 6.1 run is SKIPPED: no Python 3.13 found"
    skipped="${skipped:+$skipped; }the Django 6.1 run was SKIPPED: no Python 3.13 found (install python3.13 to run it)"
fi

# The last line says what was not run, so that a skipped leg is not mistaken for a pass.
if [ ${#failures[@]} -gt 0 ]; then
    printf 'FAILED: %s\n' "${failures[@]}" >&2
    [ -z "$skipped" ] || echo "==> and $skipped" >&2
    exit 1
fi
if [ -n "$skipped" ]; then
    echo "==> all checks run passed, but $skipped"
else
    echo "==> all checks passed (Django 5.2 and 6.1, SQLite and PostgreSQL)"
fi
