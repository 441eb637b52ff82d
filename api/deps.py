"""The dependencies routes declare: the database, a session, the calling tenant (its key counted against the
requests per minute), and the step queue."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Annotated

from fastapi import Depends, HTTPException, Request, Security, status
from fastapi.security import APIKeyHeader, HTTPAuthorizationCredentials, HTTPBearer
from sqlalchemy.orm import Session

from api.rate_limit import rate_limit_of
from models.db import Database, get_database
from models.settings import get_settings
from models.tables import Tenant
from models.tenants import hash_key, tenant_for_key

Enqueue = Callable[[int], None]
"""Puts a job's next step on the queue, given the job's id."""


def database_of(request: Request) -> Database:
    # Resolved on first use so that importing the app (``uvicorn api.app:app``) opens nothing.
    database: Database | None = request.app.state.database
    return database if database is not None else get_database()


DatabaseDep = Annotated[Database, Depends(database_of)]


def session_of(database: DatabaseDep) -> Iterator[Session]:
    """A session for the request. Routes that write commit explicitly; anything uncommitted is rolled back."""
    with database.sessions() as session:
        yield session


SessionDep = Annotated[Session, Depends(session_of)]


def enqueue_on_worker_queue(job_id: int) -> None:
    # Imported when first needed: importing the API loads neither Celery nor the worker.
    from worker.queue import enqueue_step

    enqueue_step(job_id, 0)


def enqueue_of(request: Request) -> Enqueue:
    enqueue: Enqueue | None = request.app.state.enqueue
    return enqueue if enqueue is not None else enqueue_on_worker_queue


EnqueueDep = Annotated[Enqueue, Depends(enqueue_of)]

api_key_header = APIKeyHeader(name="X-API-Key", auto_error=False, description="the tenant's API key")
bearer = HTTPBearer(auto_error=False, description="the tenant's API key as a bearer token")

MISSING_KEY = "no API key: send it in the X-API-Key header or as 'Authorization: Bearer <key>'"
UNKNOWN_KEY = "unknown or revoked API key"


def current_tenant(
    request: Request,
    database: DatabaseDep,
    header_key: Annotated[str | None, Security(api_key_header)],
    bearer_key: Annotated[HTTPAuthorizationCredentials | None, Security(bearer)],
) -> Tenant:
    key = header_key or (bearer_key.credentials if bearer_key else None)
    if not key:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, MISSING_KEY, headers={"WWW-Authenticate": "Bearer"})
    # A short session of its own: the lookup holds no connection while the route reads a large upload.
    with database.session() as session:
        tenant = tenant_for_key(session, key)
    if tenant is None:
        raise HTTPException(status.HTTP_401_UNAUTHORIZED, UNKNOWN_KEY, headers={"WWW-Authenticate": "Bearer"})
    rate_limit = rate_limit_of(get_settings())
    if rate_limit is not None:
        rate_limit.hit(hash_key(key))
    return tenant


TenantDep = Annotated[Tenant, Depends(current_tenant)]
