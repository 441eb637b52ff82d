"""Seeing the fleet: the Prometheus counters every worker process keeps (worker/metrics_server.py serves them).

They are prometheus-client's own, so they are multiprocess-safe when ``PROMETHEUS_MULTIPROC_DIR`` names a folder
the worker's processes share (set it before the worker starts; one folder per host).
"""

from __future__ import annotations

from prometheus_client import Counter, Histogram

from worker.providers.base import Usage

STEPS = Counter("plimsoll_steps_total", "Step deliveries run, by outcome", ["outcome"])
TOKENS = Counter("plimsoll_tokens_total", "Tokens of answered model requests, by kind", ["kind"])
RATE_LIMITED = Counter("plimsoll_rate_limited_total", "Model requests the provider refused with 429")
ADMISSION_WAITS = Histogram(
    "plimsoll_admission_wait_seconds",
    "How long steps without capacity were told to wait (each one a wait, none a retry)",
    buckets=(1, 5, 15, 30, 60, 120, 300, 600, 1800),
)
REQUEUED = Counter("plimsoll_reconciler_requeued_total", "Jobs the reconciler queued again")


def count_usage(usage: Usage) -> None:
    TOKENS.labels("uncached").inc(usage.input_tokens)
    TOKENS.labels("cache_read").inc(usage.cache_read_tokens)
    TOKENS.labels("cache_write").inc(usage.cache_write_tokens)
    TOKENS.labels("output").inc(usage.output_tokens)
