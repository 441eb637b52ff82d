"""The policies ``bench.cost_frontier`` sweeps, each a factory of strategies (``bench.strategies.Strategy``) that
plan one request per call.

A strategy sees what the worker would: the stored history with its estimates and the seconds since the job's
previous request. It returns the request and where its cache breakpoints go (indices of request messages; the
last message always gets one as well). Every policy but the cache-economic one gets the same rule: a breakpoint
before the oldest tool result sent whole (where clearing the oldest results changes the prefix next), as a
caller would place it; the cache-economic policy says where its stable prefix ends.

Plimsoll's policies plan from outlines, as the worker does, each result with its own estimate. (``fit`` given
message estimates shares a message's estimate among parallel results by length, which can count a request a
little short when only some of them are cleared.)
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from bench.strategies import ClearOneAtATime, KeepNewestResults, LegacyCutAtUserTurns, Request, Strategy
from bench.strategies.langchain_edit import LangChainClearToolUses
from plimsoll import apply_plan, outline, plan
from plimsoll.economics import CacheView, Economy, plan_cached
from plimsoll.fitting import Batching
from plimsoll.messages import Message, Outline

PROFILE = "claude"


@dataclass(frozen=True)
class Policy:
    family: str  # one line of the plot
    knob: str  # this point's setting
    budget: int | None  # the per-request budget it promises, if any
    make: Callable[[float], Strategy]  # given the cache TTL in seconds
    uses_ttl: bool = False


@dataclass
class Batches:
    """``plimsoll.plan`` as the worker calls it: on stored outlines, each result with its own estimate."""

    budget: int
    batching: Batching
    outlines: list[Outline] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"plimsoll.plan (budget {self.budget:,}, batching {self.batching})"

    def request(self, history: Sequence[Message], estimates: Sequence[int], idle_seconds: float = 0.0) -> Request:
        self.outlines += [outline(m, PROFILE) for m in history[len(self.outlines) :]]
        chosen = plan(self.outlines[: len(history)], self.budget, profile=PROFILE, batching=self.batching)
        return Request(apply_plan(history, chosen))


@dataclass
class Economic:
    """The worker's path: plans from stored outlines (each result with its own estimate), told the idle time and
    what the previous request cleared."""

    budget: int
    ttl_seconds: float
    economy: Economy
    previous: tuple[str, ...] | None = None
    outlines: list[Outline] = field(default_factory=list)

    @property
    def name(self) -> str:
        return f"plimsoll.plan_cached (budget {self.budget:,}, TTL {self.ttl_seconds:g} s)"

    def request(self, history: Sequence[Message], estimates: Sequence[int], idle_seconds: float = 0.0) -> Request:
        self.outlines += [outline(m, PROFILE) for m in history[len(self.outlines) :]]
        view = CacheView(ttl_seconds=self.ttl_seconds, idle_seconds=idle_seconds, previous_cleared=self.previous)
        chosen = plan_cached(
            self.outlines[: len(history)], self.budget, profile=PROFILE, cache=view, economy=self.economy
        )
        self.previous = chosen.plan.cleared
        return Request(apply_plan(history, chosen.plan), list(chosen.breakpoints))


def stateless(family: str, knob: str, budget: int | None, strategy: Strategy) -> Policy:
    return Policy(family, knob, budget, lambda _: strategy)


def plimsoll(budget: int, batching: Batching) -> Policy:
    family = {"four": "Plimsoll, batches of four", "adaptive": "Plimsoll, adaptive batches"}[batching]
    return Policy(family, f"budget {budget:,}", budget, lambda _: Batches(budget, batching))


def economic(budget: int, economy: Economy | None = None, family: str = "Plimsoll, cache-economic") -> Policy:
    economy = economy or Economy()
    knob = f"budget {budget:,}, low-water {economy.low_water:.0%}, pin {economy.pin:.0%}"
    return Policy(family, knob, budget, lambda ttl: Economic(budget, ttl, economy), uses_ttl=True)


def sweep(budget: int, fractions: Sequence[float]) -> list[Policy]:
    """Every policy at every setting, for a workload whose per-request budget is ``budget``."""
    budgets = [round(budget * f) for f in fractions]
    policies = [plimsoll(b, "four") for b in budgets]
    policies += [plimsoll(b, "adaptive") for b in budgets]
    policies += [economic(b) for b in budgets]
    policies += [economic(budget, Economy(low_water=w), "cache-economic, low-water sweep") for w in (0.6, 0.7, 0.9)]
    policies += [economic(budget, Economy(pin=pin), "cache-economic, pin sweep") for pin in (0.0, 0.2, 0.5)]
    policies += [stateless("clear one at a time", f"budget {b:,}", b, ClearOneAtATime(b)) for b in budgets]
    policies += [
        stateless("keep the newest N", f"N = {n}, over {budget:,}", None, KeepNewestResults(budget, n))
        for n in (3, 6, 12, 24)
    ]
    for trigger, keep, at_least in ((0.25, 3, 0.0), (1.0, 3, 0.0), (1.0, 12, 0.0), (1.0, 3, 0.25), (1.0, 12, 0.25)):
        edit = LangChainClearToolUses(round(trigger * budget), keep, round(at_least * budget))
        knob = f"trigger {edit.trigger:,}, keep {keep}, clear_at_least {edit.clear_at_least:,}"
        policies.append(stateless("ClearToolUsesEdit", knob, None, edit))
    policies.append(stateless("legacy (reference)", f"budget {budget:,}", None, LegacyCutAtUserTurns(budget)))
    return policies
