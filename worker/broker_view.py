"""What the Redis broker holds of a step queue: the steps waiting in its lists and those a worker has taken but not
acknowledged (running, or held until their countdown ends). The reconciler asks it before queueing a step again, so
that a step only waiting behind a backlog is left in its place and only a lost one is sent again.

kombu's Redis transport keeps a queue as one list per priority (worker/fairness.py) and the messages delivered but
not acknowledged in one hash (``unacked``), each a JSON envelope around the task's base64 body ``[args, kwargs,
embed]``; a step's args are ``(job_id, step)``. Reading them all costs one pass over the queue: the reconciler
reads it only in a round that has jobs past their deadline.
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import redis
from redis.exceptions import RedisError

from worker.fairness import priority_lists
from worker.names import STEP_TASK

logger = logging.getLogger(__name__)

UNACKED = "unacked"  # kombu's default unacked_key
UNACKED_INDEX = "unacked_index"  # kombu's default unacked_index_key: when each was taken (seconds since 1970)
Step = tuple[int, int | None]  # a job and its step (None: whichever is current when it runs)


def queued_steps(client: redis.Redis, queues: Iterable[str], *, grace: float | None = None) -> set[Step] | None:
    """The steps of ``queues`` the broker holds now, waiting or taken and unacknowledged; None if Redis cannot
    be read (the reconciler then queues again as it would without a view).

    With ``grace``, a step taken but unacknowledged counts only until ``grace`` seconds after it was taken (or
    after its countdown ends): a live worker runs it by then, while one a killed worker had taken stays in the
    hash until the visibility timeout, ten minutes or more, and its job would wait that long."""
    names = list(queues)
    try:
        with client.pipeline(transaction=True) as pipe:  # one moment: no message moves between what is read
            for name in (name for queue in names for name in priority_lists(queue)):
                pipe.lrange(name, 0, -1)
            pipe.hgetall(UNACKED)
            pipe.zrange(UNACKED_INDEX, 0, -1, withscores=True)
            *lists, unacked, taken_at = pipe.execute()
        messages = [message for listed in lists for message in listed]
        taken = {_text(tag): float(score) for tag, score in taken_at}
        for tag, envelope in unacked.items():
            message, _exchange, routing_key = json.loads(envelope)
            if routing_key in names and (grace is None or _still_taken(message, taken.get(_text(tag)), grace)):
                messages.append(message)
    except (RedisError, ValueError, TypeError) as error:
        logger.warning("reconciler: the broker's queue could not be read (%s)", type(error).__name__)
        return None
    return {step for step in map(step_of, messages) if step is not None}


def _still_taken(message: dict[str, Any], taken: float | None, grace: float) -> bool:
    if taken is None:  # taken this moment: its index entry is written after the hash's
        return True
    eta = message.get("headers", {}).get("eta")
    due = max(taken, datetime.fromisoformat(eta).timestamp() if eta else taken)
    return time.time() < due + grace


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def step_of(raw: bytes | str | dict[str, Any]) -> Step | None:
    """The job and step a message of the broker runs; None if it is not a step message this version wrote."""
    try:
        message = raw if isinstance(raw, dict) else json.loads(raw)
        if message.get("headers", {}).get("task") != STEP_TASK:
            return None
        body = message["body"]
        if message.get("properties", {}).get("body_encoding") == "base64":
            body = base64.b64decode(body)
        job_id, step = [*json.loads(body)[0], None][:2]
        return int(job_id), (int(step) if step is not None else None)
    except (ValueError, KeyError, TypeError, IndexError):
        return None
