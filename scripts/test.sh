#!/usr/bin/env bash
# The whole test suite, as CI runs it:
#   ruff (lint + format), mypy, and lint-imports (the import layers in pyproject.toml);
#   the docs site built with `mkdocs build --strict` (a broken link or anchor, or a page
#   missing from the navigation, fails it), once;
#   pytest on SQLite and on PostgreSQL, with two Django versions (the legs below);
#   the release check (tests/test_release.py: the wheel and the sdist built, installed in a
#   new virtual environment, and checked and migrated by a new project), once.
# The legs, and what each proves:
#   Django 6.1, Python 3.13, SQLite and PostgreSQL: every test. The cluster tests (real
#     qcluster processes), the browser tests (headless Chromium) and the fuzz test
#     (Schemathesis over the live API) run here only: they test our processes, pages and
#     HTTP API, whose behaviour does not change with Django's version; both databases,
#     because the cluster's row locks and transactions differ between them.
#   Django 5.2, python3, SQLite and PostgreSQL: every test but those marked cluster,
#     browser or fuzz (-m "not cluster and not browser and not fuzz"): our models,
#     migrations, ORM queries, admin, views, checks and API on the older supported Django,
#     where version differences show. Without Python 3.13 the 6.1 leg is skipped (the last
#     line says so) and these legs run every test, so that nothing goes unrun.
# The legs run one after the other (each its SQLite run, then its PostgreSQL run, on test
# databases of its own), the linters and the release check beside the Django 5.2 legs;
# each step's output is printed in one piece when it ends. On 2 cores this takes about
# 33 minutes from a fresh clone, the Django 6.1 legs 25 of them (issue 32: under 35).
# Extra arguments go to every pytest run, e.g. `scripts/test.sh -k ratelimit -x`; a `-m`
# among them replaces the Django 5.2 legs' selection.
# PostgreSQL: role root, no password, 127.0.0.1:5432, database "ratequeue" (pytest-django
# creates test_ratequeue_django5 and test_ratequeue_django6 beside it);
# RATEQUEUE_TEST_POSTGRES_URL=postgres://... changes it.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh

POSTGRES_URL=${RATEQUEUE_TEST_POSTGRES_URL:-postgres://root@127.0.0.1:5432/ratequeue}
pytest_args=("$@")
steps=$(mktemp -d)  # the steps' output, and the names of those that failed
trap 'rm -rf "$steps"' EXIT

# step TITLE COMMAND...: run COMMAND, then print its output in one piece under TITLE, with
# whether it passed and how long it took; a failure is recorded for the last line.
step() {
    local title=$1 started=$SECONDS status=0 log
    shift
    log=$(mktemp "$steps/log.XXXXXX")
    "$@" >"$log" 2>&1 || status=$?
    until mkdir "$steps/printing" 2>/dev/null; do sleep 0.1; done  # one step's output at a time
    if [ "$status" -eq 0 ]; then
        echo "==> $title: passed in $((SECONDS - started)) s"
    else
        echo "==> $title: FAILED in $((SECONDS - started)) s"
        echo "$title" >>"$steps/failures"
    fi
    cat "$log"
    rmdir "$steps/printing"
    return "$status"
}

# The tests of our own processes, pages and HTTP API: the newest Django runs them (the
# header says why); an empty selection means every test.
PROCESS_TESTS="cluster or browser or fuzz"

# pytest_on VENV DJANGO SELECTION [DATABASE_URL]: the tests with VENV's pytest (those of the
# -m SELECTION, or all when it is empty), on SQLite or on the PostgreSQL server at
# DATABASE_URL, on a test database named after DJANGO.
pytest_on() {
    local venv=$1 django=$2 selection=$3 url=${4:-}
    # The release check does not depend on the database or Django's version: it runs once,
    # as a step of its own (release).
    # So does the docs site's strict build (the docs step).
    local args=(--deselect tests/test_release.py)
    args+=(--deselect tests/test_docs_site.py::test_the_docs_site_builds_strictly)
    [ -z "$selection" ] || args+=(-m "$selection")
    args+=("${pytest_args[@]}")
    if [ -n "$url" ]; then
        DATABASE_URL=$url RATEQUEUE_TEST_DB_SUFFIX=$django "$venv/bin/pytest" "${args[@]}"
    else
        env -u DATABASE_URL RATEQUEUE_TEST_DB_SUFFIX="$django" "$venv/bin/pytest" "${args[@]}"
    fi
}

# test_django VENV DJANGO LABEL SELECTION: the tests of SELECTION (all when empty) on
# SQLite, then on PostgreSQL.
test_django() {
    local venv=$1 django=$2 label=$3 selection=$4
    trap 'exit 130' INT TERM
    [ -z "$selection" ] || label="$label, -m \"$selection\""
    step "pytest [$label, SQLite]" pytest_on "$venv" "$django" "$selection" || true
    step "pytest [$label, PostgreSQL]" pytest_on "$venv" "$django" "$selection" "$POSTGRES_URL" \
        || true
}

lint() {
    trap 'exit 130' INT TERM
    step "ruff check" .venv/bin/ruff check . || true
    step "ruff format" .venv/bin/ruff format --check . || true
    step "mypy" .venv/bin/mypy || true
    step "lint-imports" .venv/bin/lint-imports --no-logo || true
    step "docs site (mkdocs build --strict)" docs_site || true
}

# docs_site: the documentation site, its Python reference included, built strictly into a
# directory that is then removed (tests/test_docs_site.py does the same for a local run).
docs_site() {
    local site status=0
    site=$(mktemp -d)
    NO_MKDOCS_2_WARNING=1 .venv/bin/python -m mkdocs build --strict --site-dir "$site" || status=$?
    rm -rf "$site"
    return "$status"
}

# release: the wheel and the sdist, installed from pip's cache or the package index.
release() {
    trap 'exit 130' INT TERM
    step "release check (wheel and sdist)" .venv/bin/pytest -m release tests/test_release.py || true
}

# beside_the_tests: the linters and the docs site, then the release check, while Django
# 5.2's tests run.
beside_the_tests() {
    lint
    release
}

# in_background COMMAND...: start COMMAND in a process group of its own, so that an
# interrupt reaches it (and pytest stops the clusters it started); $! is its id.
started=()
in_background() {
    set -m
    "$@" &
    set +m
    started+=("$!")
}
interrupt() {
    trap - INT TERM
    for group in "${started[@]}"; do kill -INT -- "-$group" 2>/dev/null || true; done
    wait
    exit 130
}
trap interrupt INT TERM

ensure_postgres
skipped=""
ensure_chromium || skipped="the browser tests were SKIPPED: no /usr/bin/chromium and /usr/bin/chromedriver (apt-get install chromium chromium-driver)"

# Each Django version's tests start once its environment is ready, the longer run (Django
# 6.1) first, and the two one after the other: side by side, on 2 cores, the cluster and
# browser tests' processes starve each other and timing-sensitive tests turn flaky.
# Django 5.2 leaves the process tests to 6.1, unless 6.1 cannot run here.
py313=$(find_python 3.13)
django5_selection=""
if [ -n "$py313" ]; then
    django5_selection="not ($PROCESS_TESTS)"
    if step "environment: .venv-django6" make_venv .venv-django6 "$py313" dev,bench "Django>=6.1,<6.2"; then
        test_django .venv-django6 django6 "Django 6.1, Python 3.13" ""
    fi
else
    echo "==> the Django 6.1 run is SKIPPED: no Python 3.13 found; Django 5.2 runs every test"
    skipped="${skipped:+$skipped; }the Django 6.1 run was SKIPPED: no Python 3.13 found (install python3.13 to run it)"
fi
if step "environment: .venv" make_venv .venv python3 dev,bench "Django>=5.2,<5.3"; then
    in_background beside_the_tests
    test_django .venv django5 "Django 5.2, $(python3 --version)" "$django5_selection"
fi
wait

# The last line says what was not run, so that a skipped leg is not mistaken for a pass.
if [ -s "$steps/failures" ]; then
    sed 's/^/FAILED: /' "$steps/failures" >&2
    [ -z "$skipped" ] || echo "==> and $skipped" >&2
    exit 1
fi
if [ -n "$skipped" ]; then
    echo "==> all checks run passed, but $skipped"
else
    echo "==> all checks passed (Django 6.1: every test; Django 5.2: all but the cluster, browser and fuzz tests; SQLite and PostgreSQL)"
fi
