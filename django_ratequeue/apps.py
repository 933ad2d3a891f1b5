"""The app's configuration: what every process does as Django starts."""

from django.apps import AppConfig


class RateQueueConfig(AppConfig):
    """Start django-ratequeue in each process: its checks, its worker threads, its jobs."""

    name = "django_ratequeue"
    verbose_name = "Rate limits and queues"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from django_ratequeue import checks  # noqa: F401  (registers the system checks)
        from django_ratequeue.engine import (
            agent,  # noqa: F401  (starts an agent thread in each django-q2 worker)
            host,  # noqa: F401  (starts a runner thread in each django-q2 worker)
        )
        from django_ratequeue.engine.registry import autodiscover
        from django_ratequeue.plugins import load

        # The plug-ins declare their phases of the loop's steps.
        load()

        # Only registered jobs run: register them in every process, web and worker alike.
        autodiscover()
