"""The example project under an ASGI server: ``uvicorn example_project.asgi:application``.

Event streams then wait without holding a thread or a database connection
(docs/operations.md, "Deployment")."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")
application = get_asgi_application()
