"""``python -m bench.fleet_resilience [--scaled] [--write]``, run by ``make bench`` right after ``bench.fleet``: what
the fleet benchmark measures beyond its burst runs, with the default settings: jobs at 1/5 and 1/2 of their
measured demand (bench/fleet_demand.py), recovery after a whole worker is killed with 1,000 steps queued, and a
hung call (bench/fleet_recovery.py). Goals are marked met / NOT MET here; ``--write`` writes
``bench/results/fleet_resilience.md`` stating the commit."""

from __future__ import annotations

import argparse
from dataclasses import dataclass

from bench import fleet, fleet_demand, fleet_recovery
from bench.goals import RECOVERY_GOAL_SECONDS, Goal, render_goals
from bench.provenance import header, keep

SCALED_IDLE_SECONDS = 5.0  # the scaled-down run's idle timeout; the full run keeps the default (120 s)


@dataclass(frozen=True)
class More:
    demand: fleet_demand.Demand
    kill: fleet_recovery.KillResult
    hang: fleet_recovery.HangResult


def run(*, scaled: bool) -> More:
    if scaled:
        demand = fleet_demand.run(fleet_demand.SCALED, fleet_demand.SCALED_LEVELS, fleet_demand.SCALED_LATENCY_SECONDS)
    else:
        demand = fleet_demand.run(fleet_demand.FULL)
    kill = fleet_recovery.measure_kill(fleet_recovery.KillRun(queued=150 if scaled else 1_000))
    hang = fleet_recovery.measure_hang(SCALED_IDLE_SECONDS if scaled else None)
    return More(demand=demand, kill=kill, hang=hang)


def goals(more: More) -> list[Goal]:
    kill, hang = more.kill, more.hang
    return [
        *fleet_demand.goals(more.demand),
        Goal(
            f"recovery ≤ {RECOVERY_GOAL_SECONDS:.0f} s after a worker kill with {kill.queued_at_kill:,} steps queued",
            kill.met,
        ),
        Goal(
            f"a hung call releases its job within the idle timeout ({hang.idle_seconds:g} s, "
            f"+{fleet_recovery.HANG_SLACK_SECONDS:g} s to give it up and store that)",
            hang.met,
        ),
    ]


def render(workload: fleet.Workload, more: More) -> str:
    kill, hang = more.kill, more.hang
    command = "python -m bench.fleet_resilience" + (" --scaled" if workload == fleet_demand.SCALED else " --write")
    lines = [
        "# The fleet's resilience: demand levels, a worker killed, a hung call",
        "",
        header(command),
        "",
        *fleet_demand.render(workload, more.demand),
        "## Recovery",
        "",
        f"- A whole worker instance (main process and pool children) killed with SIGKILL while {kill.queued_at_kill:,} "
        f"steps waited in the queue: of the {kill.held} jobs whose lease it held, the surviving worker claimed "
        f"{kill.recovered} again, the last {kill.seconds:.1f} s after the kill (documented: lease + reconcile "
        f"interval ≈ {kill.documented:.0f} s; the reconciler queues them on the recovery queue, served in turn with "
        f"the backlog). {kill.unclaimed} more it had taken but not claimed yet: their step messages were lost with "
        "it, and the reconciler queues them again on the step queue, behind the backlog (not timed).",
        f"- A hung model call (idle timeout {hang.idle_seconds:g} s): the job released "
        + (f"{hang.released:.1f} s" if hang.released is not None else "never")
        + " after the emulator took the request, its step sent again after "
        + (f"{hang.resent:.1f} s" if hang.resent is not None else "never")
        + f"; the job {hang.finished}.",
        "",
        "## Goals (demand, recovery)",
        "",
        render_goals(goals(more), "verdict last"),
    ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.fleet_resilience", description=__doc__)
    parser.add_argument("--scaled", action="store_true", help="the scaled-down runs the tests make")
    parser.add_argument("--write", action="store_true", help=f"write {fleet.RESULTS / 'fleet_resilience.md'}")
    args = parser.parse_args(argv)
    report = render(fleet_demand.SCALED if args.scaled else fleet_demand.FULL, run(scaled=args.scaled))
    print(report)
    if args.write:
        keep(report, "fleet_resilience.md")


if __name__ == "__main__":
    main()
