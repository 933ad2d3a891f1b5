"""An installed app (in the test settings) whose jobs are in ``tasks.py``, where Celery and
django.tasks users put theirs: start-up finds them as it finds ``jobs.py``."""
