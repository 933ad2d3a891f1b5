"""The claims of de-duplicated and debounced enqueues (``unique_for``, ``debounce``)."""

from __future__ import annotations

from django.db import models


class UniqueClaim(models.Model):
    """Say which job answers an enqueue's unique key, and until when.

    ``key`` is a digest of the mode, the function, the owner and the unique key
    (plugins/unique/policy.py). Written only by enqueues, with INSERT ... ON CONFLICT
    (plugins/unique/claims.py); docs/deduplication.md tells how."""

    key = models.CharField(primary_key=True, max_length=64)
    job_id = models.CharField(max_length=200)
    # unique_for: the end of the window. debounce: the job's start, pushed with it.
    expires_at = models.DateTimeField(db_index=True)

    class Meta:
        verbose_name = "unique claim"

    def __str__(self) -> str:
        return f"claim {self.key[:12]} -> {self.job_id}"
