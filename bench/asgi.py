"""The benchmark's ASGI application, for bench.http's server."""

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
application = get_asgi_application()
