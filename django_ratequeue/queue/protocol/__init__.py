"""The attempt protocol: an attempt's life after dispatch, for local runners and remote
workers alike (docs/concepts.md, "The attempt protocol").

A :class:`Claimant` claims attempts (:func:`claim_local`, :func:`claim_remote`: one
statement, :func:`.sql.claim_sql`), keeps a remote one's lease (:func:`heartbeat`), tells
its progress and output, reports outcomes (:func:`report`, one :class:`Report` per
attempt, a batch in one statement) and hands back what it will not run
(:func:`release`). No other module claims or reports attempts.
"""

from .claims import (
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
from .outcome import REFUSED, Report, check_result_size
from .reports import Ended, append_output, report, report_progress

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
