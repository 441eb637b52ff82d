"""The scheduler: Celery beat, running the reconciler itself instead of queueing it, and only on one machine.

A reconciler sent to the broker waits behind the steps queued before it: behind a backlog every beat used to
expire unrun, so recovery stalled for minutes. Beat now runs each reconciler round in its own process (one atomic
``UPDATE … RETURNING`` and the enqueues of what it takes back), so no backlog can delay it and no beat is lost.

Every worker may be started with ``--beat`` (or ``plimsoll beat`` run on several hosts): a lock in Redis
(``plimsoll:scheduler:<step queue>``, held for ``LOCK_INTERVALS`` reconcile intervals and renewed at every round)
makes exactly one of them the scheduler; the others stand by and take over within that time when it dies, at
once when it stops. Without a
Redis to hold the lock (a RabbitMQ broker and no ``PLIMSOLL_LIMITER_URL``), every beat runs the rounds, which
is safe: rounds side by side never queue a job twice.
"""

from __future__ import annotations

import logging
import uuid
from typing import Any

import redis
from celery.beat import PersistentScheduler, ScheduleEntry
from redis.exceptions import RedisError
from redis.lock import Lock

from models.settings import get_settings
from worker.names import RECONCILE_TASK, RETENTION_TASK, SCHEDULER_LOCK, WEBHOOK_SWEEP_TASK
from worker.services import shared_redis
from worker.tracebacks import scrubbed_traceback

logger = logging.getLogger(__name__)

LOCK_INTERVALS = 3  # a dead scheduler's lock lapses after this many reconcile intervals


class SchedulerLock:
    """Whether this process is the one scheduler: takes the lock when free, renews it while it holds it."""

    def __init__(self, client: redis.Redis | None, *, seconds: float, name: str = SCHEDULER_LOCK) -> None:
        self._lock: Lock | None = None
        if client is not None:
            self._lock = Lock(client, name, timeout=seconds, thread_local=False)
            self._lock.local.token = uuid.uuid4().hex.encode()  # ours for life: renewed, never re-drawn

    def release(self) -> None:
        try:
            if self._lock is not None and self._lock.owned():
                self._lock.do_release(self._lock.local.token)
        except RedisError:
            pass  # it lapses by itself

    def held(self) -> bool:
        if self._lock is None:
            return True
        try:
            if self._lock.owned():
                return bool(self._lock.reacquire())
            token = self._lock.local.token
            if self._lock.do_acquire(token):
                logger.info("scheduler: this process is the scheduler now")
                return True
            return False
        except RedisError as error:  # Redis is down: the workers are stalled too; try again at the next round
            logger.warning("scheduler: the lock could not be checked (%s)", type(error).__name__)
            return False


class ReconcilingScheduler(PersistentScheduler):  # type: ignore[misc]  # Celery is untyped
    """Celery beat's scheduler, with the reconciler run in place rather than sent, by the lock's holder only."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        settings = get_settings()
        seconds = LOCK_INTERVALS * settings.reconcile_every_seconds
        name = f"{SCHEDULER_LOCK}:{self.app.conf.task_default_queue}"  # one scheduler per service sharing the Redis
        self.scheduler_lock = SchedulerLock(shared_redis(settings), seconds=seconds, name=name)

    def close(self) -> None:
        self.scheduler_lock.release()  # a beat that stops hands over at once
        super().close()

    def apply_entry(self, entry: ScheduleEntry, producer: Any = None) -> None:
        if entry.task == WEBHOOK_SWEEP_TASK:
            self._sweep_webhooks()
            return
        if entry.task not in (RECONCILE_TASK, RETENTION_TASK):
            super().apply_entry(entry, producer=producer)
            return
        if not self.scheduler_lock.held():
            return
        if entry.task == RETENTION_TASK:  # one sweep per interval for the whole service, run by a worker
            super().apply_entry(entry, producer=producer)
            return
        from worker.tasks import reconcile_now  # the tasks module imports the app: import it once beat runs

        try:
            queued = reconcile_now()
            # Every few seconds: a round that took nothing back is worth a line only when debugging.
            level = logging.INFO if queued else logging.DEBUG
            logger.log(level, "scheduler: reconciler round done, %d jobs queued again", queued)
        except Exception as error:  # where, not what: a database error's text quotes the values it was given
            logger.error("scheduler: a reconciler round failed; the next one follows\n%s", scrubbed_traceback(error))

    def _sweep_webhooks(self) -> None:
        """The webhooks' sweep, in place like the reconciler (rounds side by side are safe, but one is enough)."""
        if not self.scheduler_lock.held():
            return
        from worker.webhook_tasks import sweep_now

        try:
            queued = sweep_now()
            logger.log(logging.INFO if queued else logging.DEBUG, "scheduler: webhooks sweep, %d deliveries", queued)
        except Exception as error:
            logger.error("scheduler: a webhooks sweep failed; the next one follows\n%s", scrubbed_traceback(error))
