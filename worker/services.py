"""Building a step's services from the settings: the database, the providers and the queue."""

from __future__ import annotations

import threading
from collections.abc import Callable

import redis

from models.budgets import Budgets, namespace_of, spent_in_ledger
from models.db import Database, get_database
from models.endpoints import api_key_for
from models.jobs import job_endpoint
from models.settings import Settings, get_settings
from models.tables import Job
from worker.admission import Limiter
from worker.outages import in_transaction
from worker.providers import make_provider, timeouts
from worker.providers.base import Provider
from worker.step import Enqueue, Services


def providers(settings: Settings) -> Callable[[Job], Provider]:
    """One adapter per endpoint the jobs record (models/endpoints.py), made on first use and shared (the SDK
    clients are thread-safe)."""
    made: dict[tuple[str, str], Provider] = {}
    lock = threading.Lock()

    def provider_for(job: Job) -> Provider:
        endpoint = job_endpoint(job, settings)
        with lock:
            if (endpoint.provider, endpoint.base_url) not in made:
                made[endpoint.provider, endpoint.base_url] = make_provider(
                    endpoint.provider,
                    api_key=api_key_for(endpoint, settings),
                    base_url=endpoint.base_url,
                    timeouts=timeouts(settings),
                )
            return made[endpoint.provider, endpoint.base_url]

    return provider_for


def shared_redis(settings: Settings) -> redis.Redis | None:
    """The Redis every worker on every machine shares (the limiter, the scheduler's lock): PLIMSOLL_LIMITER_URL,
    else the broker when it is Redis; None without one."""
    url = settings.shared_redis_url()
    return redis.Redis.from_url(url, socket_timeout=5.0, socket_connect_timeout=5.0) if url else None


def limiter(settings: Settings, client: redis.Redis | None = None) -> Limiter | None:
    """The shared admission limiter; None when admission is off or there is no Redis to share (the in-process
    queue, a RabbitMQ broker without PLIMSOLL_LIMITER_URL)."""
    if not (settings.admission and settings.queue == "celery"):
        return None
    client = client or shared_redis(settings)
    return Limiter(client, settings.rate_limits) if client is not None else None


def budgets(settings: Settings, database: Database) -> Budgets | None:
    """The money budgets every worker shares, rebuilt from the ledger in ``database`` when Redis lacks them; None
    without a shared Redis (the in-process queue without PLIMSOLL_LIMITER_URL)."""
    client = shared_redis(settings) if settings.queue == "celery" or settings.limiter_url else None
    if client is None:
        return None
    with database.session() as session:
        namespace = namespace_of(session)
    return Budgets(
        client,
        namespace,
        lambda scope: in_transaction(database, lambda session: spent_in_ledger(session, scope)),
    )


def make_services(enqueue: Enqueue, *, settings: Settings | None = None, database: Database | None = None) -> Services:
    settings = settings or get_settings()
    database = database or get_database()
    client = shared_redis(settings) if settings.queue == "celery" else None
    return Services(
        database=database,
        settings=settings,
        provider_for=providers(settings),
        enqueue=enqueue,
        limiter=limiter(settings, client),
        budgets=budgets(settings, database),
        redis=client,
    )
