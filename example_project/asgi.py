"""The example project under an ASGI server: ``uvicorn example_project.asgi:application``.

Event streams then wait without holding a thread or a database connection, and the
database's connections come from a pool of at most ``DJANGO_DB_POOL_SIZE`` (16)
(docs/operations.md, "Deployment" and "Database connections")."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
# Requests at once are not bounded under ASGI, each with a thread and a connection of its
# own: psycopg's pool bounds the connections (settings.POOL; PostgreSQL only).
os.environ.setdefault("DJANGO_DB_POOL", "1")
application = get_asgi_application()
