#!/usr/bin/env bash
# The example project, ready to click through: migrated, an admin user (admin/admin), the
# users alice/alice and bob/bob of the "Ask the model" page, a django-q2 cluster and a
# remote worker (serving the "remote" queue over HTTP) in the background, and the web
# server on http://127.0.0.1:8000/.
# SQLite by default; set DATABASE_URL=postgres://... to use PostgreSQL.
#
#   PORT=8001                     another port
#   RATEQUEUE_DEMO_HOST=0.0.0.0   listen on every interface (only on a network you trust)
#   RATEQUEUE_DEMO_PYTHON=python  an interpreter that has the project installed, instead of
#                                 building .venv-demo (the project and its [demo] extra)
#
# Stop it with Ctrl-C or SIGTERM (to the script or its process group): both stop the web
# server and the cluster cleanly.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh

HOST=${RATEQUEUE_DEMO_HOST:-127.0.0.1}
PORT=${PORT:-8000}
if [ -n "${RATEQUEUE_DEMO_PYTHON:-}" ]; then
    PY=$RATEQUEUE_DEMO_PYTHON
else
    # Its own environment, with the demo's extra only (no test tools): the first page
    # comes sooner on a fresh machine.
    make_venv .venv-demo python3 demo "Django>=5.2,<5.3"
    PY=.venv-demo/bin/python
fi
$PY manage.py migrate --no-input
$PY manage.py demo_accounts  # admin/admin, and alice/alice and bob/bob who ask the model
# A key for the remote worker (docs/remote-workers.md) that serves the "remote" queue.
KEY=$($PY manage.py ratequeue_worker_key create "demo worker" --queues remote 2>/dev/null)
echo "==> the example project is for trying things out on your own machine: it has the"
echo "    admin user admin/admin, the users alice/alice and bob/bob, DEBUG on and a public"
echo "    SECRET_KEY. Do not expose it."

# Each child gets its own process group (set -m), so that Ctrl-C or a SIGTERM sent to this
# script's group reaches this script only, which then stops the children itself. django-q2's
# cluster stops cleanly when its main process alone is told to; a signal to the whole group
# also kills its sentinel under it, and the main process then hangs waiting for it.
set -m
$PY manage.py qcluster &
cluster=$!
$PY manage.py runserver "$HOST:$PORT" &
server=$!
# The key goes in the environment, not on the command line, where `ps` would show it. The
# worker waits quietly for the web server, which is starting too.
RATEQUEUE_WORKER_KEY=$KEY $PY -m django_ratequeue.worker \
    --url "http://127.0.0.1:$PORT/ratequeue/" \
    --handlers example_project.remote_handlers --concurrency 2 --grace 5 &
remote_worker=$!
set +m

stop() {
    trap - EXIT INT TERM
    echo "==> stopping the web server and the django-q2 cluster"
    kill -TERM -- "-$server" 2>/dev/null || true  # runserver and its autoreloader child
    kill -TERM "$cluster" 2>/dev/null || true     # the cluster's main process stops the rest
    kill -TERM "$remote_worker" 2>/dev/null || true
    wait "$server" "$cluster" "$remote_worker" 2>/dev/null || true
}
trap 'stop; exit 130' INT
trap 'stop; exit 143' TERM
trap stop EXIT

echo "==> django-q2 cluster running (pid $cluster), a remote worker (pid $remote_worker);"
echo "    open http://$HOST:$PORT/ (Prometheus metrics at /metrics)"
wait "$server"
