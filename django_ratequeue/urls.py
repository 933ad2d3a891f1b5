"""The HTTP API's URLs: ``path("ratequeue/", include("django_ratequeue.urls"))``.

docs/http-api.md describes every endpoint. It needs Django REST framework (the ``drf``
extra): without it, including these URLs raises ImproperlyConfigured saying so.
"""

from django.urls import path

from .api import views

app_name = "ratequeue"

api = [
    path("jobs/", views.EnqueueView.as_view(), name="enqueue"),
    path("jobs/bulk/", views.BulkEnqueueView.as_view(), name="enqueue-bulk"),
    path("jobs/<str:job_id>/", views.JobView.as_view(), name="job"),
    path("jobs/<str:job_id>/cancel/", views.CancelView.as_view(), name="job-cancel"),
    path("jobs/<str:job_id>/events/", views.EventsView.as_view(), name="job-events"),
    path("ratelimits/<str:name>/", views.RateLimitView.as_view(), name="ratelimit"),
]

urlpatterns = [
    *api,
    path("schema/", views.SchemaView.as_view(patterns=api), name="schema"),
]
