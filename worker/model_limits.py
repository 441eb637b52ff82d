"""Learning a model's limits from the provider's models endpoint, at most once a day per endpoint and model, so
the catalogue's static entry is only the fallback. Jobs created afterwards are validated against what was
learned; a job created before is brought within the learned limits at its first step."""

from __future__ import annotations

import logging
from datetime import UTC, timedelta

from models.catalogue import MIN_BUDGET
from models.db import Database
from models.model_facts import learned_limits, record_limits
from models.tables import Job, now
from worker.errors import ProviderError
from worker.providers.base import KnowsLimits, Provider

logger = logging.getLogger(__name__)
FRESH_FOR = timedelta(days=1)


def learn_limits(database: Database, provider: Provider, *, endpoint: str, model: str, profile: str) -> None:
    """Ask the provider at ``endpoint`` for ``model``'s limits unless they were learned there within a day; keep
    what it says, for that endpoint alone."""
    with database.session() as session:
        known = learned_limits(session, endpoint, model)
    checked = known[2] if known else None
    if checked is not None and now() - (checked if checked.tzinfo else checked.replace(tzinfo=UTC)) < FRESH_FOR:
        return
    if not isinstance(provider, KnowsLimits):
        return
    try:
        limits = provider.model_limits(model)
    except ProviderError as error:  # the static entry stays in force
        logger.info("limits of %s not learned (%s)", model, type(error).__name__)
        return
    if limits is None:
        return
    with database.session() as session:
        record_limits(session, endpoint, model, profile, context_limit=limits[0], max_output_tokens=limits[1])


def within_learned_limits(job: Job, limits: tuple[int, int] | None) -> None:
    """Bring a job that has not yet sent anything within the model's learned limits."""
    if limits is None or job.step > 0:
        return
    context_limit, max_output = limits
    max_output = min(job.max_output_tokens, max_output)
    if context_limit - max_output < MIN_BUDGET:  # no room for a request: the endpoint's figures are not usable
        return
    job.hard_limit, job.max_output_tokens = context_limit, max_output
    job.budget = min(job.budget, context_limit - max_output)
