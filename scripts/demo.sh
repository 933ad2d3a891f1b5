#!/usr/bin/env bash
# The example project, ready to click through: migrated, an admin user (admin/admin),
# a django-q2 cluster in the background and the web server on http://127.0.0.1:8000/.
# SQLite by default; set DATABASE_URL=postgres://... to use PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/_env.sh

make_venv .venv python3 "Django>=5.2,<5.3"
PY=.venv/bin/python
$PY manage.py migrate --no-input
$PY manage.py shell -c "
from django.contrib.auth import get_user_model
User = get_user_model()
if not User.objects.filter(username='admin').exists():
    User.objects.create_superuser('admin', 'admin@example.com', 'admin')
"
$PY manage.py qcluster &
cluster=$!
trap 'kill $cluster 2>/dev/null; wait $cluster 2>/dev/null' EXIT INT TERM
echo "==> django-q2 cluster running (pid $cluster); open http://127.0.0.1:${PORT:-8000}/"
$PY manage.py runserver "0.0.0.0:${PORT:-8000}"
