"""The HTTP API's URLs: ``path("ratequeue/", include("django_ratequeue.urls"))``.

docs/http-api.md describes every endpoint. It needs Django REST framework (the ``drf``
extra): without it, including these URLs raises ImproperlyConfigured saying so.
"""

from django.urls import path

from django_ratequeue.api import batches, views, workers

app_name = "ratequeue"

api = [
    path("jobs/", views.EnqueueView.as_view(), name="enqueue"),
    path("jobs/bulk/", views.BulkEnqueueView.as_view(), name="enqueue-bulk"),
    path("jobs/<str:job_id>/", views.JobView.as_view(), name="job"),
    path("jobs/<str:job_id>/cancel/", views.CancelView.as_view(), name="job-cancel"),
    path("jobs/<str:job_id>/events/", views.EventsView.as_view(), name="job-events"),
    path("ratelimits/<str:name>/", views.RateLimitView.as_view(), name="ratelimit"),
    path("batches/<str:batch_id>/", batches.BatchView.as_view(), name="batch"),
    path("batches/<str:batch_id>/cancel/", batches.BatchCancelView.as_view(), name="batch-cancel"),
    path("batches/<str:batch_id>/events/", batches.BatchEventsView.as_view(), name="batch-events"),
    # Remote workers (docs/remote-workers.md), with an Api-Key.
    path("workers/claim/", workers.ClaimView.as_view(), name="worker-claim"),
    *(
        path(f"workers/attempts/<str:attempt_id>/{name}/", view.as_view(), name=f"worker-{name}")
        for name, view in [
            ("heartbeat", workers.HeartbeatView),
            ("progress", workers.ProgressView),
            ("output", workers.OutputView),
            ("complete", workers.CompleteView),
            ("fail", workers.FailView),
            ("release", workers.ReleaseView),
        ]
    ),
]

urlpatterns = [
    *api,
    path("schema/", views.SchemaView.as_view(patterns=api), name="schema"),
]
