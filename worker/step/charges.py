"""The ledger's side of a step: each request the provider billed becomes a ``Charge`` (models/ledger.py).

A reply's charge is written in its own short transaction as soon as the reply is back, before the step's result
is stored: the provider has billed it whatever becomes of the step. Which delivery sent it is kept with it, so
that the step's result can say afterwards whose reply was used. A delivery that finds its step already done (by a
delivery that ran the same step meanwhile, its lease having lapsed mid-call) or its job ended re-kinds its own
charge as wasted; the delivery whose reply is stored re-kinds every other delivery's paid reply to that step as
wasted (one that died after its reply came back). So a request billed once is one charge, whatever Celery
redelivers, and one billed twice is two, the second shown as waste."""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from decimal import Decimal
from functools import partial

import redis
from sqlalchemy import ColumnElement, Update, bindparam, select, update
from sqlalchemy.orm import Session

from models.ledger import ChargeKind, Payer, record_charge
from models.pricing import Prices, Rates, Unpriced, prices_of
from models.settings import Settings
from models.tables import Charge, Job
from worker.names import UNRECORDED_CHARGES
from worker.outages import DatabaseUnavailable
from worker.providers.base import Usage
from worker.step.results import Planned
from worker.step.services import Services, store_surviving_outages

logger = logging.getLogger(__name__)

UNPRICED = "unpriced"
PAID = (ChargeKind.STEP, ChargeKind.COMPACTION, ChargeKind.REPLAN)


def kind_of(planned: Planned) -> ChargeKind:
    """What a planned request is, if its reply is used."""
    if planned.compaction is not None:
        return ChargeKind.COMPACTION
    return ChargeKind.REPLAN if planned.rejected is not None else ChargeKind.STEP


@dataclass(frozen=True)
class Charged:
    """A reply's charge as recorded: what the metrics count once its kind is final."""

    model: str
    kind: ChargeKind
    usd: Decimal


@dataclass(frozen=True)
class Unrecorded:
    """A reply's charge the database could not take (a long outage): kept in the shared Redis until it can."""

    job_id: int
    step: int
    delivery: str
    request_id: str | None
    uncached: int
    written: int
    read: int
    output: int


_PAYER = (  # locked: after a store of the same step, never beside it; the columns a charge needs, no Job object
    select(Job.id, Job.tenant_id, Job.parent_id, Job.model, Job.step, Job.status)
    .where(Job.id == bindparam("job_id"))
    .with_for_update()
)


def charge_reply(
    planned: Planned, usage: Usage, request_id: str | None, *, job_id: int, services: Services
) -> Charged | None:
    """The reply's charge, in its own transaction (waiting out a database outage as the step's store does). A job
    that has moved past the step, or ended, by the time the reply came back will not use it: wasted at once.
    Through an outage longer than that the reply is dropped: its charge is kept in the shared Redis, as wasted,
    and ``DatabaseUnavailable`` raised."""

    def work(session: Session) -> Charged | None:
        job = session.execute(_PAYER, {"job_id": job_id}).one_or_none()
        if job is None:
            return None
        used = job.step == planned.step and not job.status.finished
        kind = kind_of(planned) if used else ChargeKind.WASTED
        charge = _record(
            session, job, planned.step, usage, request_id, kind, planned.delivery, services, prices=planned.prices
        )
        return Charged(charge.model, kind, charge.total_usd)

    try:
        charged = store_surviving_outages(services, work)
    except DatabaseUnavailable:
        _keep(services, Unrecorded(job_id, planned.step, planned.delivery, request_id, *_tokens(usage)))
        raise
    record_unrecorded(services)
    return charged


def record_unrecorded(services: Services) -> int:
    """Record the charges kept in the shared Redis through an outage, as wasted (their replies were dropped); how
    many. Each is taken off the list before its transaction and put back if that fails."""
    if services.redis is None:
        return 0
    recorded = 0
    try:
        while isinstance(raw := services.redis.lpop(UNRECORDED_CHARGES), bytes | str):
            kept = Unrecorded(**json.loads(raw))
            try:
                store_surviving_outages(services, partial(_record_kept, kept=kept, services=services))
            except Exception:
                services.redis.rpush(UNRECORDED_CHARGES, raw)
                raise
            recorded += 1
    except (redis.RedisError, DatabaseUnavailable) as error:
        logger.warning("charges kept through an outage not recorded yet (%s)", type(error).__name__)
    return recorded


def _record_kept(session: Session, *, kept: Unrecorded, services: Services) -> None:
    job = session.get(Job, kept.job_id)
    if job is not None:
        usage = Usage(kept.uncached, kept.output, kept.written, kept.read)
        _record(session, job, kept.step, usage, kept.request_id, ChargeKind.WASTED, kept.delivery, services)


def _keep(services: Services, unrecorded: Unrecorded) -> None:
    if services.redis is None:
        logger.error("job %s: a dropped reply's charge is lost (no shared Redis to keep it)", unrecorded.job_id)
        return
    try:
        services.redis.rpush(UNRECORDED_CHARGES, json.dumps(asdict(unrecorded)))
    except redis.RedisError as error:
        logger.error("job %s: a dropped reply's charge is lost (%s)", unrecorded.job_id, type(error).__name__)


def _tokens(usage: Usage) -> tuple[int, int, int, int]:
    return usage.input_tokens, usage.cache_write_tokens, usage.cache_read_tokens, usage.output_tokens


def charge_refusal(planned: Planned, *, job_id: int, services: Services) -> None:
    """A request the provider refused (a 429, a rejection as too long): billed nothing, recorded all the same."""

    def work(session: Session) -> None:
        job = session.get(Job, job_id)
        if job is not None:
            _record(session, job, planned.step, Usage(0, 0), None, ChargeKind.REFUSED, planned.delivery, services)

    store_surviving_outages(services, work)


def used_here(session: Session, job: Job, planned: Planned) -> None:
    """This delivery's reply to the step is the one stored: any other delivery's paid reply to it was paid in vain."""
    session.execute(_WASTED_BY_OTHERS, {"of_job": job.id, "of_step": planned.step, "this": planned.delivery})


def discarded_here(session: Session, job_id: int, planned: Planned) -> None:
    """This delivery's reply to the step is dropped (the step was done meanwhile, or the job ended): wasted."""
    session.execute(_WASTED_HERE, {"of_job": job_id, "of_step": planned.step, "this": planned.delivery})


def _wasted(which: ColumnElement[bool]) -> Update:
    """The paid charges of a step's deliveries ``which`` re-kinded as wasted."""
    return (
        update(Charge)
        .where(
            Charge.job_id == bindparam("of_job"),  # not a column's name: an update's would be its SET
            Charge.step == bindparam("of_step"),
            Charge.kind.in_([k.value for k in PAID]),
            which,
        )
        .values(kind=ChargeKind.WASTED.value)
        .execution_options(synchronize_session=False)
    )


_WASTED_BY_OTHERS = _wasted(Charge.delivery != bindparam("this"))
_WASTED_HERE = _wasted(Charge.delivery == bindparam("this"))


def _record(
    session: Session,
    job: Payer,
    step: int,
    usage: Usage,
    request_id: str | None,
    kind: ChargeKind,
    delivery: str,
    services: Services,
    *,
    prices: Prices | None = None,
) -> Charge:
    """``prices``: those the step planned with (its money hold's), else the model's now."""
    charge = record_charge(
        session,
        job,
        step=step,
        kind=kind,
        prices=prices or charged_prices(job.model, services.settings),
        uncached=usage.input_tokens,
        written=usage.cache_write_tokens,
        read=usage.cache_read_tokens,
        output=usage.output_tokens,
        cache_ttl_seconds=services.settings.cache_ttl_seconds,
        delivery=delivery or None,
        request_id=request_id,
    )
    session.flush()
    return charge


def charged_prices(model: str, settings: Settings) -> Prices:
    """The model's prices now; a model nobody priced is charged 0 (its tokens still counted), and said so."""
    try:
        return prices_of(model, settings)
    except Unpriced:
        logger.warning("model %s has no price (set it in PLIMSOLL_PRICES): its requests are charged 0 USD", model)
        zero = Rates(*(Decimal(0),) * 5)
        return Prices(model, model, zero, (), UNPRICED, None, datetime.now(UTC))
