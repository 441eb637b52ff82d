"""The baselines of ``bench.fleet_throughput``: plain Celery chains of no-op tasks, and chains whose every task
makes one model call and nothing else, run by workers of the step worker's own Celery app (``celery -A
bench.noop_chain:app worker``): the same broker, the same settings (late acks, prefetch 1, priorities), so that
what differs from a job's steps is Plimsoll's own work. The last task of each chain pushes the chain's name to a
Redis list, which the benchmark waits on."""

from __future__ import annotations

from collections.abc import Callable
from functools import cache
from typing import Any

import redis
from celery import Celery, chain

from worker.celery_app import app
from worker.providers.anthropic import AnthropicProvider

NOOP_TASK = "bench.noop"
MODEL_CALL_TASK = "bench.model_call"
DONE_TASK = "bench.chain_done"


def noop() -> None:
    """Nothing: a link of the chain."""


@cache
def _provider(base_url: str) -> AnthropicProvider:
    return AnthropicProvider(api_key="bench", base_url=base_url)


def model_call(base_url: str, request: dict[str, Any]) -> None:
    """One model call through the step's own adapter (the official SDK), and nothing else: a link of the chain."""
    _provider(base_url).send(**request)


def chain_done(redis_url: str, key: str, name: str, task: str, args: list[Any]) -> None:
    """The chain's last link: does the link's work (``task`` with ``args``), then tells the benchmark it has
    ended."""
    LINKS[task](*args)
    with redis.Redis.from_url(redis_url) as client:
        client.rpush(key, name)


LINKS: dict[str, Callable[..., None]] = {NOOP_TASK: noop, MODEL_CALL_TASK: model_call}


def register(celery: Celery) -> None:
    for name, work in {**LINKS, DONE_TASK: chain_done}.items():
        celery.task(name=name, ignore_result=True)(work)


register(app)


def send_chain(
    celery: Celery, *, queue: str, links: int, redis_url: str, key: str, name: str, link: tuple[str, tuple[Any, ...]]
) -> None:
    """A chain of ``links`` tasks on ``queue``, each doing ``link``'s work (a task's name, its arguments); the last
    one also says the chain ended."""
    task, args = link
    tasks = [celery.signature(task, args, immutable=True, queue=queue) for _ in range(links - 1)]
    tasks.append(celery.signature(DONE_TASK, (redis_url, key, name, task, list(args)), immutable=True, queue=queue))
    chain(*tasks).apply_async()
