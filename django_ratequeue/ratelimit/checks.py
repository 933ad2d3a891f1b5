"""System checks for RATEQUEUE["RATE_LIMITS"] (ids django_ratequeue.E1xx)."""
