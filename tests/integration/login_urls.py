"""Django's own LoginView, protected by protect_login, for the failed-login tests."""

from django.contrib import admin
from django.contrib.auth.views import LoginView
from django.urls import path

from django_ratequeue import TokenBucket
from django_ratequeue.contrib.logins import protect_login
from django_ratequeue.decorators import ratelimit, response_failed, response_succeeded

login_view = LoginView.as_view(template_name="admin/login.html", next_page="/done/")

urlpatterns = [
    path("admin/", admin.site.urls),  # the template's links
    path(
        "login/",
        protect_login("failed_logins", config=TokenBucket(rate=3, period=3600))(login_view),
    ),
    path(  # the response-judging pattern, which cannot work here (see the tests)
        "judged-login/",
        ratelimit(
            "judged_logins",
            key="ip",
            methods=["POST"],
            count_if=response_failed,
            reset_if=response_succeeded,
            config=TokenBucket(rate=3, period=3600),
        )(login_view),
    ),
]
