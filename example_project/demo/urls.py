from django.urls import path

from . import ratelimit_views, views

app_name = "demo"

urlpatterns = [
    path("", views.home, name="home"),
    path("ratelimits/login/", ratelimit_views.login, name="ratelimit_login"),
    path("ratelimits/signup/", ratelimit_views.signup, name="ratelimit_signup"),
    path("ratelimits/messages/", ratelimit_views.messages, name="ratelimit_messages"),
    path("ratelimits/weather/", ratelimit_views.weather, name="ratelimit_weather"),
    path("api/greeting/", ratelimit_views.GreetingAPI.as_view(), name="ratelimit_api"),
]
