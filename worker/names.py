"""The names the worker's parts and their onlookers (metrics, Flower, benchmarks, tests) must agree on, stated once.
Importing it loads nothing: not Celery, not the settings."""

from __future__ import annotations

STEP_QUEUE = "plimsoll-steps"  # the step queue, unless PLIMSOLL_STEP_QUEUE names another
STEP_TASK = "plimsoll.run_step"  # one job step (worker/tasks.py)
WEBHOOK_DELIVER_TASK = "plimsoll.webhooks.deliver"  # one attempt at a webhook delivery (worker/webhook_tasks.py)
WEBHOOK_SWEEP_TASK = "plimsoll.webhooks.sweep"  # due deliveries whose message was lost, sent again (beat, in place)
RECONCILE_TASK = "plimsoll.reconcile"  # the reconciler's round, run by Celery beat in place (worker/scheduler.py)
RETENTION_TASK = "plimsoll.retention_sweep"  # a retention sweep, sent by Celery beat (models/retention.py)

# Keys in the shared Redis
RATE_LIMIT_KEYS = "plimsoll:ratelimit:"  # admission's limit groups: {provider/model-class@host}:limits, :line, ...
OUTAGE_KEY = "plimsoll:outage:database"  # a database outage already reported to Sentry (worker/outages.py)
SCHEDULER_LOCK = "plimsoll:scheduler"  # which beat runs the reconciler, per step queue (worker/scheduler.py)
UNRECORDED_CHARGES = "plimsoll:charges:unrecorded"  # paid replies' charges kept through a database outage
