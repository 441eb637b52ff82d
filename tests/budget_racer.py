"""One of the processes racing for one budget in tests/test_budgets.py. The fork server they start from imports
the module of their target: this one holds only what a racer needs."""

from __future__ import annotations

import random
import time
from decimal import Decimal
from typing import Any

import redis

from models.budgets import Budgets, job_scope
from testbed.stack import REDIS_URL


def race_for_the_budget(namespace: str, main_job: int, seed: int, results: Any) -> None:
    """Reserves a worst case and pays at most that, again and again, until refused with nothing held by anyone:
    the budget itself is spent (a refusal while others hold is tried again, as a step waits for its hold)."""
    budgets = Budgets(redis.Redis.from_url(REDIS_URL), namespace, lambda scope: Decimal(0))
    scopes = [job_scope(1, main_job, Decimal("1.00"))]
    rng = random.Random(seed)
    spent = Decimal(0)
    for n in range(1_000):
        over = budgets.reserve(f"{seed}:{n}", scopes, Decimal("0.07"), hold_seconds=30)
        if over is None:
            cost = Decimal(rng.randint(10, 70)) / 1000  # what the reply cost: at most its worst case
            time.sleep(rng.random() / 200)
            budgets.settle(f"{seed}:{n}", scopes, cost)
            spent += cost
        elif over.held == 0:
            break
        else:
            time.sleep(rng.random() / 200)
    results.put(spent)
