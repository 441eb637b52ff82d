"""Seeing the fleet: the Prometheus counters every worker process keeps (worker/metrics_server.py serves them).

They are prometheus-client's own, so they are multiprocess-safe when ``PROMETHEUS_MULTIPROC_DIR`` names a folder
the worker's processes share (set it before the worker starts; one folder per host).
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING

from prometheus_client import Counter, Histogram

if TYPE_CHECKING:  # importing the providers loads both model SDKs, which the metrics server has no use for
    from worker.providers.base import Usage

STEPS = Counter("plimsoll_steps_total", "Step deliveries run, by outcome", ["outcome"])
TOKENS = Counter("plimsoll_tokens_total", "Tokens of answered model requests, by kind", ["kind"])
RATE_LIMITED = Counter("plimsoll_rate_limited_total", "Model requests the provider refused with 429")
ADMISSION_WAITS = Histogram(
    "plimsoll_admission_wait_seconds",
    "How long steps without capacity were told to wait (each one a wait, none a retry)",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
)
RATE_LIMIT_WAITS = Histogram(
    "plimsoll_rate_limit_wait_seconds",
    "How long steps the provider refused with 429 were told to wait (each one a wait, none a retry)",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
)
# Measured, not promised: from the moment a delivery learns it has no capacity (admission says wait, or the
# provider answers 429) until its worker process is free again. A process that slept out its wait would show it.
CAPACITY_WAIT_HELD = Histogram(
    "plimsoll_capacity_wait_held_seconds",
    "How long a worker process stayed busy with a step after learning it had to wait for capacity, by cause",
    ["cause"],
    buckets=(0.01, 0.05, 0.1, 0.5, 1, 5, 15, 60),
)
# Counted once per request, with its final kind (a reply found wasted by the delivery that sent it counts as
# wasted); the ledger (models/ledger.py) is the record, this the running view of it.
COST = Counter("plimsoll_cost_usd", "USD the provider billed for model requests, by model and kind", ["model", "kind"])
REQUEUED = Counter(
    "plimsoll_reconciler_requeued_total", "Jobs the reconciler queued again, by what held them", ["held"]
)
STILL_QUEUED = Counter(
    "plimsoll_reconciler_still_queued_total",
    "Jobs past their deadline the reconciler left alone because the broker still holds their step",
)
# Where a step's time goes, per delivery: "limits" (learning the model's limits before a first step), "claim"
# (lock, gates and plan, in one transaction), "plan" (the planning within it), "admission", "send" (the model's
# reply), "store" (the reply and tool results), "enqueue" (the steps queued after the commit) and "task" (the
# whole Celery task). bench/fleet_throughput.py reads them from a fleet's workers.
STEP_PHASES = Histogram(
    "plimsoll_step_phase_seconds",
    "Time step deliveries spent in each part of their way",
    ["phase"],
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300),
)


def count_usage(usage: Usage) -> None:
    TOKENS.labels("uncached").inc(usage.input_tokens)
    TOKENS.labels("cache_read").inc(usage.cache_read_tokens)
    TOKENS.labels("cache_write").inc(usage.cache_write_tokens)
    TOKENS.labels("output").inc(usage.output_tokens)


def count_cost(model: str, kind: str, usd: Decimal) -> None:
    COST.labels(model, kind).inc(float(usd))
