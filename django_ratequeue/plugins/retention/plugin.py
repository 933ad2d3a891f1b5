"""How retention joins the loop: a step that did no work prunes a little in the background."""

from __future__ import annotations

from django_ratequeue.engine import hooks
from django_ratequeue.plugins.retention.pruning import prune_in_background

hooks.add_idle_work("retention", prune_in_background)
