"""What a step's parts hand each other: the request a step planned (``Planned``), what it decided in a transaction
and what must wait until that commits (``Decided``), and the step's ``Outcome``, the task's result."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, Literal

from models.budgets import Scope
from models.pricing import Prices
from models.tables import Strategy
from plimsoll import Plan
from plimsoll.compaction import Compaction
from worker.providers.base import Provider

Wake = tuple[int, int, float | None]  # a job, the step to run, and how many seconds to wait first


@dataclass(frozen=True)
class Outcome:
    """What a delivery of a step did: the task's result."""

    job_id: int
    action: Literal[
        "continued",
        "waiting",
        "finished",
        "retry",
        "rate_limited",
        "waiting_for_capacity",
        "waiting_for_slot",
        "waiting_for_budget",
        "skipped",
    ]
    step: int
    status: str
    stage: str | None = None
    estimated_tokens: int | None = None
    reported_tokens: int | None = None
    retry_in: float | None = None

    def summary(self) -> dict[str, Any]:
        """What Flower shows as the task's result, the most telling first: Flower cuts the column short, and its
        args column already names the job and the step."""
        order = ("status", "action", "stage", "estimated_tokens", "reported_tokens", "retry_in", "job_id", "step")
        return {k: getattr(self, k) for k in order if getattr(self, k) is not None}


@dataclass(frozen=True)
class Decided:
    """How a step ended or why it stopped here, decided in a transaction, and what must wait until that commits."""

    outcome: Outcome
    wake: Sequence[Wake] = ()  # steps to queue once the transaction commits
    report: BaseException | None = None  # what to send to Sentry


@dataclass(frozen=True)
class Planned:
    """A step's request, decided in the first transaction and sent outside of any."""

    step: int
    strategy: Strategy
    provider: Provider
    provider_name: str
    endpoint: str  # the host it goes to, which admission keeps limits for
    model: str
    max_tokens: int
    system: str
    tools: list[dict[str, Any]]
    request: list[dict[str, Any]]
    chosen: Plan
    planning_budget: int
    factor: float
    carried: list[dict[str, Any]] = field(default_factory=list)  # stored with the reply: delegate results
    seconds: float = 0.0  # time spent in our code
    rejected: tuple[int, int] | None = None  # a first attempt rejected as too long: (our estimate, its real size)
    breakpoints: tuple[int, ...] = ()  # request messages ending a prefix the next requests keep
    compaction: Compaction | None = None  # the request asks for a summary of this range (worker/compaction.py)
    counted_input: int = 0  # what the request is expected to count against the provider's input-token limit
    tenant_id: int = 0  # whose share of the admission line the request takes
    spends: tuple[Scope, ...] = ()  # the money budgets the request spends: its main job's, its tenant's day and month
    prices: Prices | None = None  # what it is charged at (None: the model has no price; no money is held)
    worst_usd: Decimal = Decimal(0)  # its worst case (models.costs.worst_case), held in ``spends`` before sending
    wind_down: str | None = None  # which budget is nearly spent ("money", "steps", "tokens"), the agent told so
    delivery: str = ""  # the delivery that planned it (its lease owner), which the ledger charges it to
