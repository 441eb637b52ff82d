"""The baseline of ``bench.fleet_throughput``: plain Celery chains of no-op tasks, run by workers of the step
worker's own Celery app (``celery -A bench.noop_chain:app worker``): the same broker, the same settings (late acks,
prefetch 1, priorities), so that what differs from a job's steps is Plimsoll's own work. The last task of each
chain pushes the chain's name to a Redis list, which the benchmark waits on."""

from __future__ import annotations

import redis
from celery import Celery, chain

from worker.celery_app import app

NOOP_TASK = "bench.noop"
DONE_TASK = "bench.chain_done"


def noop() -> None:
    """Nothing: a link of the chain."""


def chain_done(redis_url: str, key: str, name: str) -> None:
    """The chain's last link: tells the benchmark it has ended."""
    with redis.Redis.from_url(redis_url) as client:
        client.rpush(key, name)


def register(celery: Celery) -> None:
    celery.task(name=NOOP_TASK, ignore_result=True)(noop)
    celery.task(name=DONE_TASK, ignore_result=True)(chain_done)


register(app)


def send_chain(celery: Celery, *, queue: str, links: int, redis_url: str, key: str, name: str) -> None:
    """A chain of ``links`` tasks on ``queue``: ``links - 1`` no-ops, then the one that says it ended."""
    tasks = [celery.signature(NOOP_TASK, immutable=True, queue=queue) for _ in range(links - 1)]
    tasks.append(celery.signature(DONE_TASK, (redis_url, key, name), immutable=True, queue=queue))
    chain(*tasks).apply_async()
