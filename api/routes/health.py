"""Liveness for load balancers and compose healthchecks: answers 200 only when the database answers."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Response, status
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from api.deps import DatabaseDep
from api.schemas import Health

logger = logging.getLogger(__name__)

router = APIRouter(tags=["health"])


@router.get("/healthz", responses={503: {"model": Health, "description": "the database does not answer"}})
def health(database: DatabaseDep, response: Response) -> Health:
    try:
        with database.session() as session:
            session.execute(text("SELECT 1"))
    except SQLAlchemyError as error:
        # The error's kind alone: its text may quote a statement's values.
        logger.warning("health check: the database does not answer (%s)", type(error).__name__)
        response.status_code = status.HTTP_503_SERVICE_UNAVAILABLE
        return Health(status="unavailable", database=type(error).__name__)
    return Health(status="ok", database="ok")
