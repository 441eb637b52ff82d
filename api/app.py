"""The HTTP API. ``uvicorn api.app:app`` serves it on the database of the settings; tests and the embedded demo
build their own with ``create_app``."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi_offline import FastAPIOffline

from api.deps import Enqueue
from api.errors import install_error_handlers
from api.idempotency import Answered, Idempotency, answered
from api.limits import BodyLimit
from api.routes import continuation, documents, events, health, jobs, models, notices, usage, webhooks
from api.uploads import body_limit
from models.db import Database
from models.settings import get_settings
from models.webhooks import set_announcer
from worker.sentry import start_sentry

DESCRIPTION = """\
Plimsoll runs long LLM agent jobs step by step, fitting every request into the model's context budget.

Authenticate with the tenant's API key: the `X-API-Key` header, or `Authorization: Bearer <key>`.
Every error answers `{"detail": "..."}`.
"""


@asynccontextmanager
async def close_events_hub(app: FastAPI) -> AsyncIterator[None]:
    """The event streams' listener (api/events_hub.py) starts with the first stream and stops with the app."""
    yield
    hub = getattr(app.state, "events_hub", None)
    if hub is not None:
        await hub.close()


def announce_on_worker_queue(delivery_ids: list[int]) -> None:
    from worker.webhook_tasks import announce  # imported when first needed: it loads Celery

    announce(delivery_ids)


def create_app(*, database: Database | None = None, enqueue: Enqueue | None = None) -> FastAPI:
    """The API on ``database`` (default: the settings' database), queueing steps with ``enqueue`` (default: the
    Celery queue of ``worker.queue``). Starts Sentry when the settings name a DSN."""
    start_sentry()
    # Swagger UI and ReDoc from the assets fastapi-offline ships: /docs and /redoc work without the internet.
    app = FastAPIOffline(title="Plimsoll", version="0.1.0", description=DESCRIPTION, lifespan=close_events_hub)
    app.state.database = database
    if get_settings().queue == "celery":
        set_announcer(announce_on_worker_queue)  # webhooks of events this process records (models/webhooks.py)
    app.state.enqueue = enqueue
    install_error_handlers(app)
    app.add_exception_handler(Answered, answered)
    app.add_middleware(Idempotency)  # inside the body limit: a body it reads has passed it
    app.add_middleware(BodyLimit, limit=body_limit)
    for module in (documents, jobs, events, continuation, notices, webhooks, models, usage, health):
        app.include_router(module.router)
    return app


app = create_app()
