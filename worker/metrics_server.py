"""``python -m worker.metrics_server --port 9808``: the fleet's Prometheus metrics, served with a password.

Counters come from every worker process of this host (worker/metrics.py; with ``PROMETHEUS_MULTIPROC_DIR``
shared with the workers) or from this process alone. What is read at scrape time (queued steps, jobs by state,
the limits learned and the fleet's share of them) comes from Redis and the database, so any host reports the
whole fleet for those. HTTP basic auth: user ``PLIMSOLL_METRICS_USER`` (``metrics``), password
``PLIMSOLL_METRICS_PASSWORD`` (required: it will not start without one).
"""

from __future__ import annotations

import argparse
import base64
import hmac
import json
import math
import os
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC
from typing import Any
from wsgiref.simple_server import WSGIServer, make_server

import redis
from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.registry import Collector
from sqlalchemy import func, select

from models.db import Database, get_database
from models.settings import Settings, get_settings
from models.tables import Job, JobStatus, now
from worker.admission import waiting_by_tenant
from worker.fairness import priority_lists
from worker.metrics import ADMISSION_WAITS, RATE_LIMITED, REQUEUED, STEPS, TOKENS
from worker.names import RATE_LIMIT_KEYS, STEP_QUEUE
from worker.rate_limits import KINDS
from worker.services import shared_redis


class FleetCollector(Collector):
    """What is read at scrape time: queued steps, jobs by state, and the limits the fleet has learned."""

    def __init__(self, settings: Settings, database: Database) -> None:
        self.settings, self.database = settings, database

    def collect(self) -> Iterator[Metric]:
        jobs = GaugeMetricFamily("plimsoll_jobs", "Jobs by state", labels=["state"])
        with self.database.session() as session:
            for state, count in session.execute(select(Job.status, func.count()).group_by(Job.status)):
                jobs.add_metric([state], count)
        yield jobs
        client = shared_redis(self.settings)
        if client is None:
            return
        depth = GaugeMetricFamily("plimsoll_queue_depth", "Steps waiting in the broker's queue", labels=["queue"])
        oldest = GaugeMetricFamily(
            "plimsoll_queue_oldest_seconds", "How long the oldest step in the broker's queue waited", labels=["queue"]
        )
        queue = self.settings.step_queue or STEP_QUEUE
        depth.add_metric([queue], sum(client.llen(name) for name in priority_lists(queue)))
        oldest.add_metric([queue], oldest_queued_seconds(client, queue))
        yield depth
        yield oldest
        in_line = GaugeMetricFamily(
            "plimsoll_tenant_waiting_steps",
            "Steps waiting, per tenant: in the admission line for capacity, or as jobs queued behind the tenant's cap",
            labels=["tenant", "reason"],
        )
        longest = GaugeMetricFamily(
            "plimsoll_tenant_oldest_waiting_seconds",
            "How long the tenant's oldest waiting step has waited, by the same reasons",
            labels=["tenant", "reason"],
        )
        for name, waiting in sorted(waiting_by_tenant(client).items()):
            in_line.add_metric([name, "capacity"], waiting.steps)
            longest.add_metric([name, "capacity"], waiting.oldest_seconds)
        for tenant_id, (count, since) in sorted(self._queued_jobs().items()):
            in_line.add_metric([str(tenant_id), "queued"], count)
            longest.add_metric([str(tenant_id), "queued"], since)
        yield in_line
        yield longest
        limits = GaugeMetricFamily(
            "plimsoll_rate_limit_per_minute", "Provider limits learned or set, per group", labels=["group", "kind"]
        )
        share = GaugeMetricFamily("plimsoll_rate_limit_share", "The fleet's learned share of a limit", labels=["group"])
        for key in client.scan_iter(f"{RATE_LIMIT_KEYS}*:limits"):
            group = _text(key).split("{", 1)[-1].split("}", 1)[0]
            for field, value in client.hgetall(key).items():
                name = _text(field)
                if name == "share":
                    share.add_metric([group], float(value))
                elif name in KINDS:
                    limits.add_metric([group, name], float(value))
        client.close()
        yield limits
        yield share

    def _queued_jobs(self) -> dict[int, tuple[int, float]]:
        """Per tenant: its main jobs not started yet (behind its cap, or not yet reached by a worker), and the age
        of the oldest."""
        query = (
            select(Job.tenant_id, func.count(), func.min(Job.created_at))
            .where(Job.status == JobStatus.QUEUED, Job.parent_id.is_(None))
            .group_by(Job.tenant_id)
        )
        moment = now()
        with self.database.session() as session:
            return {
                tenant: (count, (moment - (first if first.tzinfo else first.replace(tzinfo=UTC))).total_seconds())
                for tenant, count, first in session.execute(query)
            }


def oldest_queued_seconds(client: redis.Redis, queue: str) -> float:
    """How long the oldest message of a Redis queue has waited, from the time its step was sent (the header
    ``plimsoll_queued_at`` that worker/tasks.py sets); 0 when the queue is empty."""
    sent: list[float] = []
    for name in priority_lists(queue):
        oldest = client.lindex(name, -1)  # kombu pushes on the left and takes from the right
        try:
            sent.append(float(json.loads(oldest)["headers"]["plimsoll_queued_at"]) if oldest is not None else math.inf)
        except (ValueError, KeyError, TypeError):
            continue
    if not sent or min(sent) == math.inf:
        return 0.0
    seconds, micros = client.time()
    return max(0.0, seconds + micros / 1_000_000 - min(sent))


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def registry(settings: Settings, database: Database) -> CollectorRegistry:
    """Every process's counters (multiprocess mode) or this one's, and the fleet's state."""
    collected = CollectorRegistry()
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        MultiProcessCollector(collected)  # type: ignore[no-untyped-call]  # prometheus-client leaves it untyped
    else:
        for metric in (STEPS, TOKENS, RATE_LIMITED, ADMISSION_WAITS, REQUEUED):
            collected.register(metric)
    collected.register(FleetCollector(settings, database))
    return collected


WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


def with_basic_auth(app: WsgiApp, user: str, password: str) -> WsgiApp:
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    def checked(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if not hmac.compare_digest(environ.get("HTTP_AUTHORIZATION", ""), expected):
            start_response("401 Unauthorized", [("WWW-Authenticate", 'Basic realm="plimsoll"')])
            return [b"unauthorized\n"]
        return app(environ, start_response)

    return checked


def metrics_server(host: str, port: int, *, settings: Settings, database: Database) -> WSGIServer:
    password = os.environ.get("PLIMSOLL_METRICS_PASSWORD", "")
    if not password:
        raise SystemExit("PLIMSOLL_METRICS_PASSWORD is not set: the metrics are not served without a password")
    user = os.environ.get("PLIMSOLL_METRICS_USER", "metrics")
    app = with_basic_auth(make_wsgi_app(registry(settings, database)), user, password)
    return make_server(host, port, app)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m worker.metrics_server", description="Serve /metrics with a password."
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9808)
    args = parser.parse_args(argv)
    metrics_server(args.host, args.port, settings=get_settings(), database=get_database()).serve_forever()


if __name__ == "__main__":
    main()
