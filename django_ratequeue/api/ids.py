"""The ids HTTP clients choose, scoped per owner.

A client's ``options.id`` is stored as ``~<owner tag>~<id>`` (:func:`stored_id`) and
shown as the client chose it (:func:`shown_id`). docs/http-api.md ("Ids are the client's
own") tells why.
"""

from __future__ import annotations

import hashlib
import re
from typing import Any

from django_ratequeue.jobs import JOB_ID_MAX_LENGTH

TAG_LENGTH = 12
SCOPED = re.compile(rf"~[0-9a-f]{{{TAG_LENGTH}}}~")
# The longest id a client may choose: the id column less the scope's prefix.
CLIENT_ID_MAX_LENGTH = JOB_ID_MAX_LENGTH - TAG_LENGTH - 2


def owner_tag(owner: str) -> str:
    """Return the tag of ``owner`` (as stored) that prefixes its clients' ids."""
    return hashlib.sha256(owner.encode()).hexdigest()[:TAG_LENGTH]


def stored_id(owner: str, client_id: str) -> str:
    """Return the stored id of ``owner``'s job that its client calls ``client_id``."""
    return f"~{owner_tag(owner)}~{client_id}"


def shown_id(job_id: str) -> str:
    """Return a job's id as the API shows it: a client's id without its scope."""
    match = SCOPED.match(job_id)
    return job_id[match.end() :] if match else job_id


def shown_outcome(outcome: Any) -> Any:
    """Return a batch's outcome as the API shows it: its jobs' ids as their clients chose them.

    The stored outcome, which the batch's callback receives, keeps the stored ids."""
    if not isinstance(outcome, dict):
        return outcome
    lists = ("succeeded", "failed", "canceled")
    shown = {key: [shown_id(job_id) for job_id in outcome[key]] for key in lists if key in outcome}
    return {**outcome, **shown}
