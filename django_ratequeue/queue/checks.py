"""System checks for RATEQUEUE["QUEUES"] and the loop timing (ids django_ratequeue.E2xx)."""
