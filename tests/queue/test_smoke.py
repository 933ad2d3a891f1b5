from django_ratequeue import Status, enqueue, get_handle
from tests.queue import jobs


def test_enqueue_runs_to_completion(cluster, tmp_path):
    cluster()
    handle = enqueue(jobs.add, args=[2, 3])
    assert handle.result(timeout=20) == 5
    assert get_handle(handle.id).status() == Status.COMPLETE
