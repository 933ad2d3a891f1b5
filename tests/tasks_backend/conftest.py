from tests.queue.conftest import cluster, wait_for  # noqa: F401  (the real qcluster fixture)
