"""A benchmark's goals, each marked met or NOT MET as measured in one run, and the one way they are printed."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from bench.report import table

# How soon the fleet recovers from dead workers, the one goal of both benchmarks that kill them: bench.fleet_resilience
# times a killed worker's jobs until a survivor claims them again, bench.chaos the last fault until every job has
# ended. The reconciler queues a dead worker's step once its lease lapses: lease (30 s) + reconcile interval (10 s)
# ≈ 40 s with the default settings (docs/worker.md); the goal leaves 20 s on top for a surviving worker to take it
# behind a backlog on a busy 2-core machine.
RECOVERY_GOAL_SECONDS = 60.0


@dataclass(frozen=True)
class Goal:
    text: str
    met: bool | None  # None: not measured by this run
    measured: str = ""  # what the run measured, where the report shows it

    @property
    def verdict(self) -> str:
        return "not measured" if self.met is None else "met" if self.met else "NOT MET"


# A table (goal, verdict and, when any goal has one, what was measured), or a list with the verdict first
# ("- met: ...") or last ("- ...: met").
Layout = Literal["table", "verdict first", "verdict last"]


def render_goals(goals: Sequence[Goal], layout: Layout = "table") -> str:
    if layout == "table":
        if any(g.measured for g in goals):
            return table(["goal", "", "measured"], [[g.text, g.verdict, g.measured] for g in goals])
        return table(["goal", ""], [[g.text, g.verdict] for g in goals])
    if layout == "verdict first":
        return "\n".join(f"- {g.verdict}: {g.text}" for g in goals)
    return "\n".join(f"- {g.text}: {g.verdict}" for g in goals)
