"""The admin for unique claims: which job answers a unique key, until when; release one.

A claim's key is a digest (docs/deduplication.md), so the page shows the job it points at
and its expiry. Deleting a claim releases its key: the next enqueue of that key writes
a new job.
"""

from __future__ import annotations

from django.contrib import admin
from django.http import HttpRequest
from django.urls import reverse
from django.utils.html import format_html
from django.utils.safestring import SafeString

from django_ratequeue import clock
from django_ratequeue.admin.actions import PermittedActionsMixin
from django_ratequeue.admin.display import moment
from django_ratequeue.admin.objectids import StorableIdsMixin
from django_ratequeue.admin.placement import OffTheIndexMixin
from django_ratequeue.plugins.unique.models import UniqueClaim


@admin.register(UniqueClaim)
class UniqueClaimAdmin(
    OffTheIndexMixin, StorableIdsMixin, PermittedActionsMixin, admin.ModelAdmin
):
    list_display = ["short_key", "job", "expires", "live"]
    search_fields = ["=key", "=job_id"]
    ordering = ["-expires_at"]
    readonly_fields = ["key", "job_id", "expires_at"]

    class Media:
        css = {"all": ["ratequeue/lists.css"]}

    @admin.display(description="key", ordering="key")
    def short_key(self, claim: UniqueClaim) -> str:
        return claim.key[:12]

    @admin.display(description="job", ordering="job_id")
    def job(self, claim: UniqueClaim) -> SafeString:
        url = reverse("admin:django_ratequeue_job_change", args=[claim.job_id])
        return format_html('<a href="{}">{}</a>', url, claim.job_id)

    @admin.display(description="expires", ordering="expires_at")
    def expires(self, claim: UniqueClaim) -> SafeString | str:
        return moment(claim.expires_at)

    @admin.display(description="live", boolean=True)
    def live(self, claim: UniqueClaim) -> bool:
        return claim.expires_at > clock.now()

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
