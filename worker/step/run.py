"""A step from end to end: claimed and planned in one transaction, admitted and sent outside of any, and what came
back stored in another, surviving a database outage; what may only follow a commit (queueing steps, alerting)
follows it."""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import replace
from functools import partial

from sqlalchemy.orm import Session

from models.ledger import ChargeKind
from models.statuses import CALIBRATED
from models.tables import Job
from worker.errors import ProviderError, RateLimited, TooLong
from worker.metrics import CAPACITY_WAIT_HELD, RATE_LIMIT_WAITS, STEP_PHASES, count_cost
from worker.outages import DatabaseUnavailable, in_transaction
from worker.providers.base import Reply
from worker.step.charges import charge_refusal, charge_reply
from worker.step.claim import begin, learn_limits_first
from worker.step.endings import internal_error
from worker.step.reply import answered
from worker.step.results import Decided, Outcome, Planned, Wake
from worker.step.send import admit, send
from worker.step.services import Services, store_surviving_outages
from worker.step.spend import Hold, hold, settle
from worker.step.unanswered import compaction_refused, replanned, unanswered
from worker.tenant_cap import unpark
from worker.tracebacks import scrubbed_traceback

logger = logging.getLogger(__name__)


def run_step(job_id: int, services: Services, *, step: int | None = None) -> Outcome:
    """Run step ``step`` (the job's current one when None) of job ``job_id``. A database outage raises
    ``DatabaseUnavailable`` before the model is called; after it, the reply is stored through the outage."""
    started = time.perf_counter()
    owner = uuid.uuid4().hex
    if step in (None, 0):
        with STEP_PHASES.labels("limits").time():
            learn_limits_first(job_id, services)
    with STEP_PHASES.labels("claim").time():
        begun = in_transaction(services.database, lambda session: begin(session, job_id, step, owner, services))
    if isinstance(begun, Decided):
        return after_commit(begun, services)
    planned = replace(begun, seconds=time.perf_counter() - started, delivery=owner)
    with STEP_PHASES.labels("admission").time():  # the money it may spend held, then its share of the rate limits
        held = hold(planned, job_id, owner, services)
        waiting = admit(planned, job_id, owner, services) if isinstance(held, Hold) or held is None else None
    if isinstance(held, Decided):
        return after_commit(held, services)
    if isinstance(held, Outcome):
        return held
    if waiting is not None:
        settle(held, services, None)
        return waiting
    with STEP_PHASES.labels("send").time():
        answer, answered_at = _sent(planned, job_id, owner, services, held)
    if isinstance(answer, TooLong) and planned.compaction is not None:  # the job goes on without the summary
        skipped = store_surviving_outages(
            services, partial(compaction_refused, job_id=job_id, planned=planned, error=answer, services=services)
        )
        return after_commit(skipped, services)
    if isinstance(answer, TooLong) and answer.tokens and planned.strategy in CALIBRATED:
        # A rejection that states the real size is a measurement: plan once more with it, a smaller request.
        again = store_surviving_outages(
            services, partial(replanned, job_id=job_id, planned=planned, error=answer, services=services)
        )
        if isinstance(again, Decided):
            return after_commit(again, services)
        planned = again
        held = hold(planned, job_id, owner, services)
        if isinstance(held, Decided):
            return after_commit(held, services)
        if isinstance(held, Outcome):
            return held
        answer, answered_at = _sent(planned, job_id, owner, services, held)
    if isinstance(answer, ProviderError):
        failed = store_surviving_outages(
            services, partial(unanswered, job_id=job_id, planned=planned, error=answer, services=services)
        )
        outcome = after_commit(failed, services)
        if isinstance(answer, RateLimited):  # a 429: the step waits in the broker, not in this process
            RATE_LIMIT_WAITS.observe(outcome.retry_in or 0.0)
            CAPACITY_WAIT_HELD.labels("rate_limited").observe(time.monotonic() - answered_at)
        return outcome
    storing = time.perf_counter()
    try:
        charged = charge_reply(planned, answer.usage, answer.request_id, job_id=job_id, services=services)
        with STEP_PHASES.labels("store").time():
            stored = store_surviving_outages(
                services,
                partial(answered, job_id=job_id, planned=planned, reply=answer, services=services, started=storing),
            )
    except DatabaseUnavailable:
        usage = answer.usage
        logger.error(
            "job %s: a paid reply to step %s was dropped, the database being unavailable for %.0f s; it will be paid "
            "again (input %d, cache read %d, cache write %d, output %d tokens)",
            job_id, planned.step, services.settings.store_retry_seconds, usage.input_tokens,
            usage.cache_read_tokens, usage.cache_write_tokens, usage.output_tokens,
        )  # fmt: skip
        raise
    if charged is not None:  # the reply is used, unless the step was done meanwhile or its job ended: then wasted
        kind = ChargeKind.WASTED if stored.outcome.action == "skipped" else charged.kind
        count_cost(charged.model, kind, charged.usd)
    return after_commit(stored, services)


def _sent(
    planned: Planned, job_id: int, owner: str, services: Services, held: Hold | None
) -> tuple[Reply | ProviderError, float]:
    """Send the request; its hold in the money budgets becomes what the reply cost, or is given back. A request
    the provider refused (a 429, too long) is charged 0 in the ledger."""
    try:
        answer, answered_at = send(planned, job_id, owner, services)
    except BaseException:
        settle(held, services, None)
        raise
    settle(held, services, answer.usage if isinstance(answer, Reply) else None)
    if isinstance(answer, RateLimited | TooLong):
        try:
            charge_refusal(planned, job_id=job_id, services=services)
        except DatabaseUnavailable:
            logger.warning("job %s: a refused request of step %s was not recorded (0 USD)", job_id, planned.step)
    return answer, answered_at


def fail_after_internal_error(job_id: int, step: int | None, error: Exception, services: Services) -> Outcome:
    """A step raised what nothing here expects: a defect, not a fault of the provider or the database (those have
    their own handling). Delivered again it would raise again at every deadline, so the job fails at once, naming
    the error's type but never its text, its main job is woken, and the error is reported once."""
    services.report(error)
    ended = store_surviving_outages(services, partial(internal_error, job_id=job_id, step=step, error=error))
    return after_commit(ended, services)


def after_commit(decided: Decided, services: Services) -> Outcome:
    """What may only happen once the step's transaction has committed: queueing steps, alerting. A step that
    cannot be queued now is queued by the reconciler when its job's deadline passes."""
    with STEP_PHASES.labels("enqueue").time():
        _wake(decided, services)
    if decided.report is not None:
        services.report(decided.report)
    return decided.outcome


def _wake(decided: Decided, services: Services) -> None:
    wake = list(decided.wake)
    if decided.outcome.action == "finished":
        wake += _waiting_for_slot(decided.outcome.job_id, services)
    for job_id, step, delay in wake:
        try:
            services.enqueue(job_id, step, delay)
        except Exception as error:
            logger.warning(
                "job %s: step %s not queued (%s); the reconciler will\n%s",
                job_id,
                step,
                type(error).__name__,
                scrubbed_traceback(error),
            )


def _waiting_for_slot(job_id: int, services: Services) -> list[Wake]:
    """The first steps of the parked jobs of the finished job's tenant that have its place now
    (worker/tenant_cap.py). Should this fail, the reconciler's next round gives them the place."""

    def waiting(session: Session) -> list[int]:
        job = session.get(Job, job_id)
        if job is None or job.parent_id is not None:
            return []
        return unpark(session, job.tenant_id, services.settings)

    try:
        return [(waiting_id, 0, None) for waiting_id in in_transaction(services.database, waiting)]
    except Exception as error:
        logger.warning("job %s: the jobs waiting for its place were not queued (%s)", job_id, type(error).__name__)
        return []
