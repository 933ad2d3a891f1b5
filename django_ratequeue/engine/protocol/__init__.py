"""The attempt protocol: an attempt's life after dispatch, for every kind of worker.

Local runners and remote workers alike (docs/concepts.md, "The attempt protocol"); no other
module claims or reports attempts. A :class:`Claimant` claims (:func:`claim_local`,
:func:`claim_remote`), keeps a remote one's lease (:func:`heartbeat`), tells progress and
output, reports outcomes (:func:`report`, a :class:`Report` each) and hands back (:func:`release`).
"""

from django_ratequeue.engine.protocol.claims import (
    INSTANCE,
    RETRY_ELSEWHERE,
    Claimant,
    Claimed,
    claim_local,
    claim_remote,
    heartbeat,
    release,
    through_reconnects,
)
from django_ratequeue.engine.protocol.outcome import REFUSED, Report, check_result_size
from django_ratequeue.engine.protocol.reports import Ended, append_output, report, report_progress

__all__ = [
    "INSTANCE",
    "REFUSED",
    "RETRY_ELSEWHERE",
    "Claimant",
    "Claimed",
    "Ended",
    "Report",
    "append_output",
    "check_result_size",
    "claim_local",
    "claim_remote",
    "heartbeat",
    "release",
    "report",
    "report_progress",
    "through_reconnects",
]
