"""What Plimsoll learns about a model across jobs, per endpoint (models/endpoints.py): its calibration and its
limits. The emulator, a proxy and the real API may serve one model name and count differently, so nothing learned
at one endpoint is used at another."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import bindparam
from sqlalchemy.dialects.postgresql import insert as postgres_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import Session

from models.tables import Job, ModelFacts, now
from plimsoll import Calibrator

UNKNOWN_ENDPOINT = ""  # facts learned, and jobs created, before endpoints were recorded (migration 0010)


def endpoint_of(job: Job) -> str:
    """The endpoint ``job`` learns for and from."""
    return job.endpoint if job.endpoint is not None else UNKNOWN_ENDPOINT


_KEY = ["endpoint", "model"]
_LOCKED: dict[str, Any] = {"updated_at": bindparam("at")}  # on conflict: the row locked, as an update would
_UPSERTS = {  # built once, as a step's statements are
    "postgresql": postgres_insert(ModelFacts)
    .on_conflict_do_update(index_elements=_KEY, set_=_LOCKED)
    .returning(ModelFacts),
    "sqlite": sqlite_insert(ModelFacts).on_conflict_do_update(index_elements=_KEY, set_=_LOCKED).returning(ModelFacts),
}


def facts_of(session: Session, endpoint: str, model: str, profile: str) -> ModelFacts:
    """The model's row at ``endpoint``, locked for this transaction: one upsert makes it on first use or locks
    the existing one (concurrent makers both succeed, and both get the row)."""
    at = now()
    row = {"endpoint": endpoint, "model": model, "profile": profile, "calibration": {}, "updated_at": at, "at": at}
    upsert = _UPSERTS[session.get_bind().dialect.name]
    facts = session.scalars(upsert, row, execution_options={"populate_existing": True}).one()
    if facts.profile != profile:  # the catalogue gave the model another profile: what was learned is for the old one
        facts.profile, facts.calibration = profile, {}
    return facts


def model_calibration(session: Session, endpoint: str, model: str, profile: str) -> dict[str, object]:
    """What earlier jobs of the model at ``endpoint`` saw, for a new job to start from: their recent ratios (the
    job counts its own observations). No lock: a snapshot is enough."""
    facts = session.get(ModelFacts, (endpoint, model))
    if facts is None or facts.profile != profile or not facts.calibration.get("recent"):
        return {}
    return {"recent": list(facts.calibration["recent"]), "observations": 0}


def observe_model(session: Session, endpoint: str, model: str, profile: str, *, estimated: int, reported: int) -> None:
    facts = facts_of(session, endpoint, model, profile)
    calibrator = Calibrator.from_dict(facts.calibration)
    calibrator.observe(estimated, reported)
    facts.calibration = calibrator.to_dict()


def learned_limits(session: Session, endpoint: str, model: str) -> tuple[int, int, datetime | None] | None:
    """(context limit, output limit, when checked) as ``endpoint``'s models endpoint gave them, if known."""
    facts = session.get(ModelFacts, (endpoint, model))
    if facts is None or facts.context_limit is None or facts.max_output_tokens is None:
        return None
    return facts.context_limit, facts.max_output_tokens, facts.limits_checked_at


def record_limits(
    session: Session, endpoint: str, model: str, profile: str, *, context_limit: int, max_output_tokens: int
) -> None:
    facts = facts_of(session, endpoint, model, profile)
    facts.context_limit, facts.max_output_tokens, facts.limits_checked_at = context_limit, max_output_tokens, now()
