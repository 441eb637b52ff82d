"""What ``python -m bench.fleet`` measures beyond the burst runs: jobs at 1/5 and 1/2 of demand, recovery after a
worker is killed with a backlog queued, and a hung call (bench/fleet_demand.py, bench/fleet_recovery.py)."""

from __future__ import annotations

from dataclasses import dataclass

from bench import fleet, fleet_demand, fleet_recovery

SCALED_IDLE_SECONDS = 5.0  # the scaled-down run's idle timeout; the full run keeps the default (120 s)


@dataclass(frozen=True)
class More:
    demand: fleet_demand.Demand
    kill: fleet_recovery.KillResult
    hang: fleet_recovery.HangResult


def run(*, scaled: bool) -> More:
    demand = fleet_demand.run(fleet_demand.SCALED if scaled else fleet_demand.FULL)
    kill = fleet_recovery.measure_kill(fleet_recovery.KillRun(queued=150 if scaled else 1_000))
    hang = fleet_recovery.measure_hang(SCALED_IDLE_SECONDS if scaled else None)
    return More(demand=demand, kill=kill, hang=hang)


def goals(more: More) -> list[fleet.Goal]:
    kill, hang = more.kill, more.hang
    return [
        *fleet_demand.goals(more.demand),
        fleet.Goal(
            f"recovery ≤ {fleet_recovery.RECOVERY_GOAL_SECONDS:.0f} s after a worker kill with "
            f"{kill.queued_at_kill:,} steps queued",
            kill.met,
        ),
        fleet.Goal(
            f"a hung call releases its job within the idle timeout ({hang.idle_seconds:g} s, "
            f"+{fleet_recovery.HANG_SLACK_SECONDS:g} s to give it up and store that)",
            hang.met,
        ),
    ]


def render(workload: fleet.Workload, more: More) -> str:
    kill, hang = more.kill, more.hang
    lines = [
        "",
        *fleet_demand.render(workload, more.demand),
        "## Recovery",
        "",
        f"- A whole worker instance (main process and pool children) killed with SIGKILL while {kill.queued_at_kill:,} "
        f"steps waited in the queue: the {kill.held} jobs it held were claimed again by the surviving worker "
        f"{kill.recovered} of {kill.held}, the last {kill.seconds:.1f} s after the kill (documented: lease + reconcile "
        f"interval ≈ {kill.documented:.0f} s; the reconciler queues them on the recovery queue, served in turn with "
        "the backlog).",
        f"- A hung model call (idle timeout {hang.idle_seconds:g} s): the job released "
        + (f"{hang.released:.1f} s" if hang.released is not None else "never")
        + " after the emulator took the request, its step sent again after "
        + (f"{hang.resent:.1f} s" if hang.resent is not None else "never")
        + f"; the job {hang.finished}.",
        "",
        "## Goals (demand, recovery)",
        "",
        *[
            f"- {goal.text}: {'not measured' if goal.met is None else 'met' if goal.met else 'NOT MET'}"
            for goal in goals(more)
        ],
    ]
    return "\n".join(lines) + "\n"
