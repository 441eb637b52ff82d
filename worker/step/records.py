"""What a step writes beside the history: its step record, a notice for the person, a calibration measurement."""

from __future__ import annotations

from sqlalchemy.orm import Session

from models.events import EventType, record
from models.model_facts import endpoint_of, observe_model
from models.tables import Job, Notice, Step
from plimsoll import Calibrator, DoesNotFit
from worker.providers.base import Reply
from worker.step.results import Planned


def step_record(
    job: Job, planned: Planned, step: int, *, reply: Reply | None, seconds: float, stop: str | None = None
) -> Step:
    """The record of a step whose request was sent (``reply`` None: it was not answered, ``stop`` says why)."""
    usage = reply.usage if reply else None
    return Step(
        job_id=job.id,
        step=step,
        stage=planned.chosen.stage,
        planning_budget=planned.planning_budget,
        calibration_factor=round(planned.factor, 4),
        estimated_tokens=planned.chosen.tokens,
        reported_input_tokens=usage.total_input if usage else None,
        cache_read_tokens=usage.cache_read_tokens if usage else 0,
        cache_write_tokens=usage.cache_write_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
        messages_sent=len(planned.request),
        cleared=list(planned.chosen.cleared),
        dropped=planned.chosen.dropped,
        stop_reason=reply.stop_reason if reply else stop,
        overhead_ms=round(seconds * 1000, 3),
        rejected_estimate=planned.rejected[0] if planned.rejected else None,
        rejected_tokens=planned.rejected[1] if planned.rejected else None,
    )


def unsent_step_record(job: Job, step: int, error: DoesNotFit, *, rejected: tuple[int, int] | None = None) -> Step:
    """The record of a step whose request could not be planned: nothing fit."""
    return Step(
        job_id=job.id,
        step=step,
        stage="does_not_fit",
        planning_budget=error.budget,
        calibration_factor=round(Calibrator.from_dict(job.calibration).factor, 4),
        estimated_tokens=error.needed,
        messages_sent=0,
        stop_reason="DoesNotFit",
        rejected_estimate=rejected[0] if rejected else None,
        rejected_tokens=rejected[1] if rejected else None,
    )


def record_step(session: Session, job: Job, row: Step) -> None:
    """Store a step's record with its event: its number, stage, the tokens sent against the budget, the share of
    them read from the cache (the cost comes with the ledger)."""
    session.add(row)
    sent = row.reported_input_tokens if row.reported_input_tokens is not None else row.estimated_tokens
    share = (row.cache_read_tokens or 0) / row.reported_input_tokens if row.reported_input_tokens else None
    data = {"step": row.step, "stage": row.stage, "tokens": sent, "budget": job.budget, "cache_read_share": share}
    record(session, job, EventType.STEP, data | {"stop_reason": row.stop_reason, "cost_usd": None})


def notify(session: Session, job: Job, text: str) -> None:
    """A notice for the person, and its event with its text (the person's own). Only main jobs have one: a
    subagent's end reaches the person through its parent, which reads it as a tool result and names it when it
    finishes."""
    if job.parent_id is None:
        session.add(Notice(tenant_id=job.tenant_id, job_id=job.id, text=text))
        record(session, job, EventType.NOTICE, {"text": text})


def observe(session: Session, job: Job, *, estimated: int, reported: int, model: bool = True) -> None:
    """Feed a reported count to the job's calibrator and (``model``) to its model's, which later jobs start from."""
    calibrator = Calibrator.from_dict(job.calibration)
    calibrator.observe(estimated, reported)
    job.calibration = calibrator.to_dict()
    if model:
        observe_model(session, endpoint_of(job), job.model, job.profile, estimated=estimated, reported=reported)
