"""Creating jobs and reading their progress."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

from sqlalchemy import ColumnElement, Select, and_, bindparam, case, func, literal, or_, select, text
from sqlalchemy.orm import Session

from models.catalogue import MIN_BUDGET, ModelSpec, Provider, UnknownModel, model_spec, retired_refusal
from models.documents import documents_of
from models.endpoints import Endpoint, endpoint_for
from models.errors import InvalidInput, NotFound
from models.events import EventType, record
from models.history import append_messages
from models.limits import check_queued_quota, check_reproduction, job_limits, lock_quotas, tenant_limits
from models.model_facts import learned_limits, model_calibration
from models.options import JobOptions
from models.settings import Settings, get_settings
from models.statuses import CALIBRATED, Strategy
from models.tables import Job, JobDocument, JobKind, JobStatus, Step, now
from plimsoll.compaction import POLICIES

COMPACTION = "auto"  # the default: see bench/results/compaction.md
REASON_CHARS = 300  # of a job's error, in its ended event
_PROFILES = {Strategy.ORIGINAL: "simple", Strategy.LEGACY: "chars4"}  # the reproductions count as they did


def opening_message(instruction: str, names: Sequence[str]) -> dict[str, Any]:
    """The job's first user message: the instruction and the documents it may read, by name."""
    text = instruction.strip()
    if names:
        text += f"\n\nDocuments ({len(names)}): " + ", ".join(f"`{name}`" for name in names)
    return {"role": "user", "content": text}


def create_job(
    session: Session,
    *,
    tenant_id: int,
    instruction: str,
    document_ids: Sequence[int] = (),
    options: JobOptions | None = None,
    kind: str = JobKind.MAIN,
    parent: Job | None = None,
    parent_tool_use_id: str | None = None,
    check_only: bool = False,
    settings: Settings | None = None,
) -> Job:
    """A queued job with its opening message stored, run with ``options`` (the defaults for those not given).
    Every check happens before anything is written; with ``check_only`` nothing is: the job is answered unsaved
    (no id taken from the sequence). A new main job on a retired model is refused unless the options allow it; a
    subagent follows its main job. ``settings``: the service's unless given (the demo's own)."""
    options = options or JobOptions()
    settings = settings or get_settings()
    if not instruction.strip():
        raise InvalidInput("the instruction is empty")
    if len(instruction) > settings.max_instruction_chars:
        raise InvalidInput(
            f"the instruction has {len(instruction):,} characters; the limit is {settings.max_instruction_chars:,}"
        )
    if len(document_ids) > settings.max_documents_per_job:
        raise InvalidInput(f"a job may read at most {settings.max_documents_per_job} documents")
    if len(set(document_ids)) != len(document_ids):
        raise InvalidInput("a document is listed twice")
    try:
        strategy = Strategy(options.strategy)
    except ValueError:
        raise InvalidInput(f"unknown strategy {options.strategy!r}; known: {', '.join(Strategy)}") from None
    compaction = COMPACTION if options.compaction is None else options.compaction
    if compaction not in POLICIES:
        raise InvalidInput(f"unknown compaction {compaction!r}; known: {', '.join(POLICIES)}")
    name = options.model or settings.default_model
    try:
        endpoint = _endpoint(model_spec(name, settings.models), parent, settings)
        known = learned_limits(session, endpoint.base_url, name)
        spec = model_spec(name, settings.models, learned=known[:2] if known else None)
    except UnknownModel as error:
        raise InvalidInput(str(error)) from None
    refusal = retired_refusal(spec)
    if refusal and parent is None and not options.allow_retired_model:
        raise InvalidInput(refusal)
    budget = spec.default_budget if options.budget is None else options.budget
    if not MIN_BUDGET <= budget <= spec.max_budget:
        raise InvalidInput(
            f"the budget must be between {MIN_BUDGET:,} and {spec.max_budget:,} tokens for {spec.name} "
            f"(its context limit of {spec.context_limit:,} less {spec.max_output_tokens:,} for the reply)"
        )
    if parent is None:
        check_reproduction(strategy, options, settings)
        limits = tenant_limits(session, tenant_id, settings)
        chosen = job_limits(options, limits)
        max_steps, max_input_tokens, max_cost_usd = chosen.max_steps, chosen.max_input_tokens, chosen.max_cost_usd
        if not check_only:
            lock_quotas(session, tenant_id)
            check_queued_quota(session, tenant_id, limits)
    else:  # a subagent inherits its main job's options, checked when the main job was made
        max_steps = parent.max_steps if options.max_steps is None else options.max_steps
        max_input_tokens = parent.max_input_tokens if options.max_input_tokens is None else options.max_input_tokens
        max_cost_usd = parent.max_cost_usd  # one budget: the main job's, which its subagents spend too
    if max_input_tokens < budget:
        raise InvalidInput(f"max_input_tokens must be at least the budget ({budget:,}): one request may use that much")
    documents = documents_of(session, tenant_id=tenant_id, ids=document_ids)
    names = [d.name for d in documents]
    if len(set(names)) != len(names):
        raise InvalidInput("two documents of the job have the same name")
    job = Job(
        tenant_id=tenant_id,
        kind=kind,
        parent_id=parent.id if parent else None,
        parent_tool_use_id=parent_tool_use_id,
        instruction=instruction,
        model=spec.name,
        provider=spec.provider,
        endpoint=endpoint.base_url,
        emulator=endpoint.emulator,
        profile=_PROFILES.get(strategy, spec.profile),
        budget=budget,
        hard_limit=spec.context_limit,
        max_output_tokens=spec.max_output_tokens,
        locale=options.locale or settings.default_locale,
        strategy=strategy,
        safety_net=options.safety_net,
        compaction=compaction,
        status=JobStatus.QUEUED,
        calibration=(
            model_calibration(session, endpoint.base_url, spec.name, spec.profile) if strategy in CALIBRATED else {}
        ),
        max_steps=max_steps,
        max_input_tokens=max_input_tokens,
        max_cost_usd=max_cost_usd,
        wind_down=options.wind_down,
        tool_calls={},
        # No delivery has claimed it yet: if none does by then, the reconciler queues its first step again.
        lease_until=now() + timedelta(seconds=settings.lease_seconds),
        documents=[JobDocument(document_id=d.id, position=i, name=d.name) for i, d in enumerate(documents)],
    )
    if check_only:
        return job
    session.add(job)
    session.flush()
    # A delegated task names what it should read; listing every document of the main job would ask the subagent
    # to read them all. It can still list them with its tools.
    listed = names if parent is None else []
    append_messages(session, job, [opening_message(instruction, listed)], step=0)
    if parent is None:
        record(session, job, EventType.STATUS, {"status": job.status.value})
    else:
        record(session, job, EventType.SUBAGENT_STARTED, {})
    return job


def _endpoint(spec: ModelSpec, parent: Job | None, settings: Settings) -> Endpoint:
    """Where the job's requests go: a subagent on its main job's model goes where the main job goes."""
    if parent is not None and parent.endpoint is not None and parent.model == spec.name:
        return Endpoint(spec.provider, parent.endpoint, parent.emulator)
    return endpoint_for(spec, settings)


def job_endpoint(job: Job, settings: Settings) -> Endpoint:
    """Where ``job``'s requests go: as recorded when it was created, or (a job from before endpoints were
    recorded) as the settings route its model now."""
    if job.endpoint is not None:
        return Endpoint(cast(Provider, job.provider), job.endpoint, job.emulator)
    return endpoint_for(model_spec(job.model, settings.models), settings)


def end_job(
    session: Session, job: Job, status: JobStatus, *, error: str | None = None, at: datetime | None = None
) -> None:
    """The one way a job ends (a step's every end, worker/step/; a cancellation): its final status, when (``at``, or
    now), why if it did not succeed; and no deadline, so the reconciler leaves it be. Its event is the job's last:
    a notice of the same end is written before it."""
    job.status, job.finished_at = status, at or now()
    job.lease_owner, job.lease_until = None, None
    if error:
        job.error = error
    ended = EventType.ENDED if job.parent_id is None else EventType.SUBAGENT_ENDED
    record(session, job, ended, {"status": job.status.value, "reason": short_reason(error)})


def short_reason(error: str | None) -> str | None:
    """Why a job ended, for its event: our own words (a limit, a provider's error message), never the history."""
    if error is None or len(error) <= REASON_CHARS:
        return error
    return error[: REASON_CHARS - 1] + "…"


def job_of(session: Session, *, tenant_id: int, job_id: int) -> Job:
    job = session.get(Job, job_id)
    if job is None or job.tenant_id != tenant_id:
        raise NotFound(f"no job with id {job_id}")
    return job


_LAST_STEP = select(Step).where(Step.job_id == bindparam("job_id")).order_by(Step.step.desc()).limit(1)


def last_step(session: Session, job_id: int) -> Step | None:
    return session.scalar(_LAST_STEP, {"job_id": job_id})


def steps_of(session: Session, job_id: int) -> list[Step]:
    return list(session.scalars(select(Step).where(Step.job_id == job_id).order_by(Step.step)))


@dataclass(frozen=True)
class FamilyUse:
    """What a main job and its subagents have used together of the budget they share."""

    steps: int
    input_tokens: int


FAMILY_LOCK = 0x504C46  # the advisory locks' namespace: one lock per main job while a step of its family is claimed
# One round trip: the main job's id (the job's own, or its parent's) as the lock's int4 key.
_LOCK_FAMILY = text(
    "SELECT pg_advisory_xact_lock(:space, (coalesce(parent_id, id) % 2147483648)::integer) FROM jobs WHERE id = :id"
)


def lock_family(session: Session, job_id: int) -> None:
    """Until the transaction ends, no other step of the job's family (its main job and the subagents) is claimed:
    two subagents starting at once cannot both take the family's last step. Taken before any row lock, so that it
    never waits while holding one. (SQLite writes one transaction at a time anyway.)"""
    if session.get_bind().dialect.name != "postgresql":
        return
    session.execute(_LOCK_FAMILY, {"space": FAMILY_LOCK, "id": job_id})


def _family_use(in_flight: ColumnElement[int]) -> Select[int, int]:
    return select(
        func.coalesce(func.sum(Job.step + in_flight), 0),
        func.coalesce(func.sum(Job.input_tokens + Job.cache_read_tokens + Job.cache_write_tokens), 0),
    ).where(or_(Job.id == bindparam("main"), Job.parent_id == bindparam("main")))


_FAMILY_USE = _family_use(literal(0))
_FAMILY_USE_IN_FLIGHT = _family_use(
    case(
        (and_(Job.id != bindparam("besides"), Job.lease_owner.is_not(None), Job.lease_until > bindparam("at")), 1),
        else_=0,
    )
)


def family_use(session: Session, main_job_id: int, *, besides: int | None = None) -> FamilyUse:
    """The steps and input tokens (cached or not) of a main job and all its subagents. With ``besides``, a step
    another job of the family holds the lease of (sent, its reply not yet stored) counts as taken."""
    if besides is None:
        steps, tokens = session.execute(_FAMILY_USE, {"main": main_job_id}).one()
    else:
        params = {"main": main_job_id, "besides": besides, "at": now()}
        steps, tokens = session.execute(_FAMILY_USE_IN_FLIGHT, params).one()
    return FamilyUse(int(steps), int(tokens))


def shared_limits(job: Job) -> FamilyUse:
    """How many steps and input tokens ``job``'s main job and its subagents may use together before ``job`` stops:
    the main job's limits; a subagent leaves room for its main job's report (one step, one request's input), so
    that the subagents' work reaches it."""
    if job.parent_id is None:
        return FamilyUse(job.max_steps, job.max_input_tokens)
    return FamilyUse(job.max_steps - 1, job.max_input_tokens - job.budget)


def children_of(session: Session, job_id: int) -> list[Job]:
    return list(session.scalars(select(Job).where(Job.parent_id == job_id).order_by(Job.id)))
