"""The app's models, defined beside the code that owns them."""

from .ratelimit.models import RateLimitState

__all__ = ["RateLimitState"]
