"""Pages of the example project, one per use case of django-ratequeue."""

from django.http import HttpRequest, HttpResponse
from django.shortcuts import render


def home(request: HttpRequest) -> HttpResponse:
    return render(request, "demo/home.html")
