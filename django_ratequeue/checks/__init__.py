"""The system checks: ``settings.RATEQUEUE``'s (:mod:`.config`), the services' around it
(:mod:`.services`), and the ``django.tasks`` backend's; importing this package registers
them all. A plug-in registers its own as it loads (the schedules': ``SCHEDULES``)."""

from django_ratequeue import backends as tasks_backend_checks  # noqa: F401
from django_ratequeue.checks import config, services  # noqa: F401
