"""Who runs which step until when, and the reconciler that takes back what nobody holds.

Every unfinished job carries a deadline (``lease_until``). A delivery of a step claims the job by writing its
own token as ``lease_owner`` and keeps the lease alive while it waits for the model (``Heartbeat``). Between
steps, and while a parent waits for its subagents, the job has no owner and the deadline says by when the next
delivery must have claimed it. Whatever dies in between (a worker, its child, the broker with the queued step, the
machine after a commit and before the enqueue), the deadline passes and ``reconcile`` queues the step again.
Deliveries name the step they are for, so a late or duplicate one finds the job past it and does nothing.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from types import TracebackType

from sqlalchemy import ColumnElement, and_, case, not_, or_, select, tuple_, update
from sqlalchemy.orm import Session

from models.db import Database
from models.statuses import UNFINISHED
from models.tables import Job, now
from worker.metrics import STILL_QUEUED
from worker.tenant_cap import parked
from worker.tracebacks import scrubbed_traceback

logger = logging.getLogger(__name__)

MAX_BACKOFF = 6  # an unclaimed step is queued again at most every 2**6 leases (32 min at the default 30 s)


def deadline(seconds: float) -> datetime:
    return now() + timedelta(seconds=seconds)


def held_by_another(job: Job, at: datetime) -> bool:
    """Whether a live delivery other than the caller holds the job's current step."""
    if job.lease_owner is None or job.lease_until is None:
        return False
    until = job.lease_until if job.lease_until.tzinfo else job.lease_until.replace(tzinfo=UTC)  # SQLite drops it
    return until > at


def release(job: Job, *, seconds: float) -> None:
    """No delivery holds the job; the next one must claim it within ``seconds``."""
    job.lease_owner, job.lease_until = None, deadline(seconds)


def give_back(session: Session, *, job_id: int, owner: str, seconds: float) -> None:
    """The delivery ``owner`` gives its claim on the job back without running the step; the next delivery must
    claim it within ``seconds``."""
    session.execute(
        update(Job)
        .where(Job.id == job_id, Job.lease_owner == owner)
        .values(lease_owner=None, lease_until=deadline(seconds))
        .execution_options(synchronize_session=False)
    )


QueuedSteps = Callable[[], set[tuple[int, int | None]] | None]
"""The steps the broker holds now, as (job, step) (step None: whichever is current when it runs); None when the
broker cannot say (RabbitMQ, or Redis unreachable)."""


def reconcile(
    database: Database,
    *,
    lease_seconds: float,
    enqueue: Callable[[int, int], None],
    recover: Callable[[int, int], None] | None = None,
    queued: QueuedSteps | None = None,
) -> list[int]:
    """Queue again the current step of every unfinished job whose deadline has passed; the jobs queued.

    Jobs a delivery still held (its worker died, or its call outlived its deadline) go to ``recover`` (the
    recovery queue, which every worker serves in turn with the step queue): they already waited their turn once,
    and must not wait again behind a backlog. Jobs nobody held go to ``enqueue`` if their step message is lost; one
    the broker still holds (``queued``: only waiting behind a backlog longer than a lease) is left in its place
    with a deadline one lease on. Each group is taken by one atomic UPDATE that moves its deadline on, so
    reconcilers running side by side never queue the same job twice in one round. A failed enqueue is logged and
    tried again at the next deadline. Jobs parked behind their tenant's cap have no deadline (worker/tenant_cap.py).
    """
    in_broker = queued() if queued is not None and _any_unheld_expired(database) else None
    moment = now()
    held = _take_expired(database, moment, lease_seconds=lease_seconds, held=True)
    waiting = 0
    if in_broker:
        waiting = _still_queued(database, moment, _in(in_broker), lease_seconds=lease_seconds)
    if in_broker is not None and queued is not None:
        # Read again: a message a worker had taken but not yet marked unacknowledged at the first read shows now.
        in_broker |= queued() or set()
    # Whatever the broker held, even if its deadline passed after the moment above, is not queued again.
    unheld = _take_expired(
        database, moment, lease_seconds=lease_seconds, held=False, besides=_in(in_broker) if in_broker else None
    )
    for rows, send in ((held, recover or enqueue), (unheld, enqueue)):
        for job_id, step in rows:
            try:
                send(job_id, step)
            except Exception as error:  # the broker is down: the new deadline brings the job back
                logger.warning(
                    "job %s: could not queue step %s again (%s)\n%s",
                    job_id,
                    step,
                    type(error).__name__,
                    scrubbed_traceback(error),
                )
    if waiting:
        STILL_QUEUED.inc(waiting)
    if held or unheld:
        logger.info(
            "reconciler queued %d jobs again (%d held by a delivery that is gone): %s",
            len(held) + len(unheld),
            len(held),
            [job_id for job_id, _ in [*held, *unheld]],
        )
    return [job_id for job_id, _ in [*held, *unheld]]


def _expired(moment: datetime) -> ColumnElement[bool]:
    """Unfinished and past its deadline; a job with none is past it unless parked behind its tenant's cap."""
    return and_(
        Job.status.in_(UNFINISHED),
        or_(Job.lease_until < moment, and_(Job.lease_until.is_(None), not_(parked()))),
    )


def _any_unheld_expired(database: Database) -> bool:
    with database.session() as session:
        return session.scalar(select(Job.id).where(_expired(now()), Job.lease_owner.is_(None)).limit(1)) is not None


def _in(steps: set[tuple[int, int | None]]) -> ColumnElement[bool]:
    """Jobs whose current step is among ``steps`` (a step None: any step of its job)."""
    pairs = [(job_id, step) for job_id, step in steps if step is not None]
    any_step = [job_id for job_id, step in steps if step is None]
    return or_(tuple_(Job.id, Job.step).in_(pairs), Job.id.in_(any_step))


def _still_queued(database: Database, moment: datetime, in_broker: ColumnElement[bool], *, lease_seconds: float) -> int:
    """Move on by one lease the deadline of every unheld job past it whose step the broker still holds; how many."""
    with database.session() as session:
        rows = session.execute(
            update(Job)
            .where(_expired(moment), Job.lease_owner.is_(None), in_broker)
            .values(lease_until=moment + timedelta(seconds=lease_seconds))
            .returning(Job.id)
            .execution_options(synchronize_session=False)
        ).all()
    return len(rows)


def _take_expired(
    database: Database,
    moment: datetime,
    *,
    lease_seconds: float,
    held: bool,
    besides: ColumnElement[bool] | None = None,
) -> list[tuple[int, int]]:
    owner: ColumnElement[bool] = Job.lease_owner.is_not(None) if held else Job.lease_owner.is_(None)
    if besides is not None:
        owner = and_(owner, not_(besides))
    # A step nobody claimed may be lost, or only waiting behind a backlog longer than a lease: each time it is
    # queued again unclaimed, its next deadline doubles (up to 2**MAX_BACKOFF leases), so a backlog is not
    # multiplied by duplicates while a lost message is still queued again after one lease. (Where the broker can
    # say what it holds, a waiting step is not queued again at all: see ``reconcile``.)
    backoff = case(
        *((Job.requeues == n, moment + timedelta(seconds=lease_seconds * 2**n)) for n in range(MAX_BACKOFF)),
        else_=moment + timedelta(seconds=lease_seconds * 2**MAX_BACKOFF),
    )
    with database.session() as session:
        rows = session.execute(
            update(Job)
            .where(_expired(moment), owner)
            .values(
                lease_owner=None,
                lease_until=moment + timedelta(seconds=lease_seconds) if held else backoff,
                requeues=Job.requeues + (0 if held else 1),
            )
            .returning(Job.id, Job.step)
            .execution_options(synchronize_session=False)
        ).all()
    return [(job_id, step) for job_id, step in rows]


class Heartbeat:
    """Keeps a claimed job's lease alive from a background thread while the step waits for the model, until
    ``for_seconds`` have passed (the call's deadline): a call that outlives it is hung, and the lease lapses so
    that the reconciler hands the step to another delivery."""

    def __init__(
        self, database: Database, job_id: int, owner: str, *, seconds: float, for_seconds: float = math.inf
    ) -> None:
        self.database, self.job_id, self.owner, self.seconds = database, job_id, owner, seconds
        self.until = time.monotonic() + for_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, daemon=True, name=f"plimsoll-lease-{job_id}")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *_: type[BaseException] | BaseException | TracebackType | None) -> None:
        self._stop.set()
        self._thread.join()

    def _beat(self) -> None:
        while not self._stop.wait(self.seconds / 3) and time.monotonic() < self.until:
            try:
                with self.database.session() as session:
                    session.execute(
                        update(Job)
                        .where(Job.id == self.job_id, Job.lease_owner == self.owner)
                        .values(lease_until=deadline(self.seconds))
                        .execution_options(synchronize_session=False)
                    )
            except Exception as error:  # an outage: the lease may lapse; storing decides who wins
                logger.warning(
                    "job %s: lease not renewed (%s)\n%s", self.job_id, type(error).__name__, scrubbed_traceback(error)
                )
