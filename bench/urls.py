"""The benchmark serves no pages."""

urlpatterns: list[object] = []
