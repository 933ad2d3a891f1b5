from django.contrib.auth.views import LogoutView
from django.urls import path

from example_project.demo import ask_views, queue_views, ratelimit_views, views

app_name = "demo"

urlpatterns = [
    path("", views.home, name="home"),
    path("ratelimits/login/", ratelimit_views.login, name="ratelimit_login"),
    path("ratelimits/signup/", ratelimit_views.signup, name="ratelimit_signup"),
    path("ratelimits/messages/", ratelimit_views.messages, name="ratelimit_messages"),
    path("ratelimits/weather/", ratelimit_views.weather, name="ratelimit_weather"),
    path("api/greeting/", ratelimit_views.GreetingAPI.as_view(), name="ratelimit_api"),
    path("queue/", queue_views.queue_page, name="queue"),
    path("queue/enqueue/", queue_views.enqueue_burst, name="queue_enqueue"),
    path("queue/state.json", queue_views.queue_state, name="queue_state"),
    path("queue/jobs/<str:job_id>/cancel/", queue_views.cancel_job, name="queue_cancel"),
    path("ask/", ask_views.ask_page, name="ask"),
    path("accounts/login/", ask_views.login, name="login"),
    path("accounts/logout/", LogoutView.as_view(next_page="demo:login"), name="logout"),
]
