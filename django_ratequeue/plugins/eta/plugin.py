"""How the estimates join the engine: the estimate that ``Handle.eta()`` gives."""

from __future__ import annotations

from django_ratequeue.engine import hooks
from django_ratequeue.plugins.eta.estimates import ETA_FIELDS, job_eta

hooks.set_estimator("eta", ETA_FIELDS, job_eta)
