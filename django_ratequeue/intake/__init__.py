"""The intake: where an app's calls become job rows.

``@job`` and the job functions it returns (:mod:`.functions`), ``enqueue`` and
``enqueue_many`` (:mod:`.enqueue`), and ``submit`` for calls from outside the code, the
HTTP API's (:mod:`.submit`). It sits above the engine and the plug-ins, and composes them:
``enqueue_many(..., batch=...)`` opens a batch of the batches plug-in around the engine's
one creation path. ``django_ratequeue.jobs`` is its face.
"""
