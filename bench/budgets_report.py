"""What a ``bench.budgets`` run found, judged against issue 37's goals and printed: the ledger against the
emulator's billing log, overshoot and false stops, wind-down against hard stop, the tight tenant-day, and the
reservation's time (how each is measured: ``bench.budgets``'s docstring)."""

from __future__ import annotations

import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from bench.chaos_checks import Checks
from bench.goals import Goal, render_goals
from bench.provenance import header
from bench.report import table
from demo.run import notes_matching
from models.costs import cost_of
from models.pricing import prices_of
from models.settings import Settings
from models.statuses import UNFINISHED

LEDGER_TOLERANCE = Decimal("0.001")  # 0.1 %
RESERVATION_GOAL_MS = 2.0
# out_of_money's error (worker/step/endings.py): the worst case refused and the standing it was refused with.
_REFUSED = re.compile(r"worst case of (?P<asked>[\d.]+) USD: (?P<spent>[\d.]+) USD spent, (?P<held>[\d.]+) USD held")
ROUNDING = Decimal("0.0002")
STOPS_SHOWN = 6  # the error prints each amount to 1/10,000 USD: three of them, rounded


@dataclass(frozen=True)
class Planned:
    job_id: int
    tenant_id: int
    role: str  # "ordinary", or "wind-down" or "hard stop" with how the pair reads: "(alone)", "(subagents)"
    texts: dict[str, str]
    max_cost_usd: Decimal


@dataclass(frozen=True)
class Waited:
    """The tight tenant-day at the moment it was raised."""

    at: float  # seconds into the run
    limit: Decimal
    spent: Decimal  # Redis's standing
    held: Decimal
    ledger: Decimal  # the ledger's sum for the day
    jobs: int  # the tenant's jobs waiting
    raised_to: Decimal


Charged = tuple[int, int, int, str, Decimal, str | None, datetime]  # job, main job, tenant, kind, USD, request, at
Ended = tuple[int | None, int, str, str, str]  # parent, tenant, status, error, final answer


@dataclass
class Outcomes:
    scale_name: str
    workers: int
    processes: int
    tenants: list[tuple[int, Decimal]] = field(default_factory=list)  # id, day budget at the start
    planned: list[Planned] = field(default_factory=list)
    faults: list[str] = field(default_factory=list)
    waited: Waited | None = None
    reservation_ms: list[float] = field(default_factory=list)
    billing: list[dict[str, Any]] = field(default_factory=list)
    charges: list[Charged] = field(default_factory=list)
    jobs: dict[int, Ended] = field(default_factory=dict)
    steps: int = 0
    checks: Checks = field(default_factory=Checks)
    stranded: set[int] = field(default_factory=set)  # unfinished jobs whose step sits in Redis's unacked hash
    ended_all: bool = False
    run_seconds: float = 0.0
    wall_seconds: float = 0.0


def billed_usd(entry: dict[str, Any], settings: Settings) -> Decimal:
    """An entry of the emulator's billing log priced at the prices the ledger charges (the model's, now)."""
    return cost_of(
        prices_of(entry["model"], settings),
        uncached=entry["uncached_tokens"],
        written=entry["cache_write_tokens"],
        read=entry["cache_read_tokens"],
        output=entry["output_tokens"],
        cache_ttl_seconds=settings.cache_ttl_seconds,
    ).total


@dataclass(frozen=True)
class Comparison:
    per_job: dict[int, tuple[Decimal, Decimal]]  # ledger, billed
    per_tenant: dict[int, tuple[Decimal, Decimal]]
    unmatched: int  # billed requests no charge names
    unmatched_usd: Decimal

    @staticmethod
    def off(pair: tuple[Decimal, Decimal]) -> Decimal:
        ledger, billed = pair
        return abs(ledger - billed) / billed if billed else (Decimal(0) if ledger == 0 else Decimal(1))

    def worst(self, of: dict[int, tuple[Decimal, Decimal]]) -> Decimal:
        return max((self.off(pair) for pair in of.values()), default=Decimal(0))


def compare(outcomes: Outcomes) -> Comparison:
    settings = Settings()
    owner = {c[5]: (c[0], c[2]) for c in outcomes.charges if c[5]}
    ledger_job: dict[int, Decimal] = defaultdict(Decimal)
    ledger_tenant: dict[int, Decimal] = defaultdict(Decimal)
    for job_id, _, tenant_id, _, usd, _, _ in outcomes.charges:
        ledger_job[job_id] += usd
        ledger_tenant[tenant_id] += usd
    billed_job: dict[int, Decimal] = defaultdict(Decimal)
    billed_tenant: dict[int, Decimal] = defaultdict(Decimal)
    unmatched, unmatched_usd = 0, Decimal(0)
    for entry in outcomes.billing:
        usd = billed_usd(entry, settings)
        if entry["request_id"] not in owner:
            unmatched, unmatched_usd = unmatched + 1, unmatched_usd + usd
            continue
        job_id, tenant_id = owner[entry["request_id"]]
        billed_job[job_id] += usd
        billed_tenant[tenant_id] += usd
    return Comparison(
        {j: (ledger_job[j], billed_job[j]) for j in ledger_job.keys() | billed_job.keys()},
        {t: (ledger_tenant[t], billed_tenant[t]) for t in ledger_tenant.keys() | billed_tenant.keys()},
        unmatched,
        unmatched_usd,
    )


def family_spend(outcomes: Outcomes) -> dict[int, Decimal]:
    spent: dict[int, Decimal] = defaultdict(Decimal)
    for _, main_id, _, _, usd, _, _ in outcomes.charges:
        spent[main_id] += usd
    return spent


def overshoots(outcomes: Outcomes) -> list[str]:
    """Every budget the ledger shows spent past: main jobs (subagents included) and tenant-days."""
    over = []
    spent = family_spend(outcomes)
    for job in outcomes.planned:
        if spent[job.job_id] > job.max_cost_usd:
            over.append(f"job {job.job_id}: {spent[job.job_id]:.4f} of {job.max_cost_usd} USD")
    for (tenant_id, day), usd in tenant_days(outcomes).items():
        if usd > final_day_limit(outcomes, tenant_id):
            over.append(f"tenant {tenant_id} on {day}: {usd:.4f} USD")
    waited = outcomes.waited
    if waited and max(waited.ledger, waited.spent + waited.held) > waited.limit:
        over.append(f"the tight day when raised: {waited.ledger:.4f} USD in the ledger, {waited.limit} allowed")
    return over


def tenant_days(outcomes: Outcomes) -> dict[tuple[int, str], Decimal]:
    days: dict[tuple[int, str], Decimal] = defaultdict(Decimal)
    for _, _, tenant_id, _, usd, _, at in outcomes.charges:
        days[tenant_id, f"{at:%Y-%m-%d}"] += usd
    return days


def final_day_limit(outcomes: Outcomes, tenant_id: int) -> Decimal:
    day = dict(outcomes.tenants).get(tenant_id, Decimal(0))
    if outcomes.waited and tenant_id == outcomes.tenants[-1][0]:
        return outcomes.waited.raised_to
    return day


def money_stops(outcomes: Outcomes) -> tuple[list[str], list[str]]:
    """Jobs stopped for money, and those stopped falsely (their budget still held the worst case refused)."""
    limits = {job.job_id: job.max_cost_usd for job in outcomes.planned}
    spent = family_spend(outcomes)
    stops: list[str] = []
    false: list[str] = []
    for job_id, (parent, _, status, error, _) in outcomes.jobs.items():
        found = _REFUSED.search(error)
        if status != "incomplete" or found is None:
            continue
        main = parent or job_id
        limit = limits.get(main, Decimal(0))
        asked, standing = Decimal(found["asked"]), Decimal(found["spent"]) + Decimal(found["held"])
        stop = (
            f"job {job_id} (of {main}): asked {asked} USD with {standing} spent and held of {limit}; its main job's "
            f"ledger at the end {spent[main]:.4f}"
        )
        stops.append(stop)
        if limit - standing - asked >= ROUNDING or spent[main] + asked <= limit - ROUNDING:
            false.append(stop)
    return stops, false


def covered(outcomes: Outcomes, job: Planned) -> int:
    return len(notes_matching(outcomes.jobs[job.job_id][4], job.texts))


def pairs(outcomes: Outcomes, how: str) -> list[tuple[Planned, Planned]]:
    """The wind-down and hard-stop jobs that read ``how`` ("alone", "subagents"), side by side."""
    told = [job for job in outcomes.planned if job.role == f"wind-down ({how})"]
    cut = [job for job in outcomes.planned if job.role == f"hard stop ({how})"]
    return list(zip(told, cut, strict=True))


def subagents_covered(outcomes: Outcomes, job: Planned) -> int:
    """Documents the answers of ``job``'s subagents cover, whether or not they reached its own answer."""
    answers = "\n".join(ended[4] for ended in outcomes.jobs.values() if ended[0] == job.job_id)
    return len(notes_matching(answers, job.texts))


def tight_tenant(outcomes: Outcomes) -> tuple[Counter[str], int]:
    """The tight tenant's jobs (subagents included) by state, and how many are lost (stuck, or never made)."""
    tenant_id = outcomes.tenants[-1][0] if outcomes.tenants else -1
    ids = {job_id for job_id, ended in outcomes.jobs.items() if ended[1] == tenant_id}
    states = Counter(outcomes.jobs[job_id][2] for job_id in ids)
    lost = len(ids & {*outcomes.checks.lost, *outcomes.checks.stuck}) + sum(
        1 for job in outcomes.planned if job.tenant_id == tenant_id and job.job_id not in outcomes.jobs
    )
    return states, lost


def goals(outcomes: Outcomes) -> list[Goal]:
    comparison = compare(outcomes)
    total = sum((billed_usd(e, Settings()) for e in outcomes.billing), Decimal(0))
    worst_job, worst_tenant = comparison.worst(comparison.per_job), comparison.worst(comparison.per_tenant)
    over = overshoots(outcomes)
    stops, false = money_stops(outcomes)
    states, lost = tight_tenant(outcomes)
    mean = statistics.fmean(outcomes.reservation_ms) if outcomes.reservation_ms else float("inf")
    return [
        Goal(
            "the ledger equals the emulator's billing log at the same prices, within 0.1 %, per job and per tenant",
            bool(outcomes.billing)
            and max(worst_job, worst_tenant) <= LEDGER_TOLERANCE
            and comparison.unmatched_usd <= total * LEDGER_TOLERANCE,
            f"worst job {_pct(worst_job)}, worst tenant {_pct(worst_tenant)}; {comparison.unmatched} billed "
            f"request(s) no charge names ({comparison.unmatched_usd:.4f} USD)",
        ),
        Goal(
            "0 overshoot of any budget, 0 false stops",
            outcomes.ended_all and not over and not false,
            f"{len(over)} overshoot(s); {len(false)} false of {len(stops)} stop(s) for money"
            + ("" if outcomes.ended_all else "; not every job ended"),
        ),
        *(_wind_down_goal(outcomes, how) for how in ("alone", "subagents")),
        Goal(
            "a tenant over its day budget: its jobs wait and resume once it is raised, 0 failed, 0 lost",
            outcomes.waited is not None and outcomes.waited.jobs > 0 and states["failed"] == 0 and lost == 0,
            ("never waited" if outcomes.waited is None else f"{outcomes.waited.jobs} job(s) waited")
            + f"; then {_states(states)}; {lost} lost",
        ),
        Goal(
            f"reservation adds at most {RESERVATION_GOAL_MS:g} ms per step",
            mean <= RESERVATION_GOAL_MS,
            f"{mean:.2f} ms a step (mean of {len(outcomes.reservation_ms)})",
        ),
    ]


def _wind_down_goal(outcomes: Outcomes, how: str) -> Goal:
    """Pairs where both jobs reached their budget (ended incomplete): the wound-down answers cover more."""
    every = pairs(outcomes, how)
    counted = [(t, c) for t, c in every if _reached(outcomes, t) and _reached(outcomes, c)]
    told, cut = sum(covered(outcomes, t) for t, _ in counted), sum(covered(outcomes, c) for _, c in counted)
    return Goal(
        f"jobs ({'reading alone' if how == 'alone' else 'with subagents'}) that reach their budget end incomplete, "
        "their answers covering more documents wound down than hard-stopped",
        bool(counted) and told > cut and all(covered(outcomes, t) >= covered(outcomes, c) for t, c in counted),
        f"{len(counted)} of {len(every)} pairs reached their budget: {told} documents covered wound down, {cut} "
        "hard-stopped",
    )


def _reached(outcomes: Outcomes, job: Planned) -> bool:
    return outcomes.jobs[job.job_id][2] == "incomplete"


def _pct(share: Decimal) -> str:
    return f"{float(share) * 100:.3f} %"


def _states(states: Counter[str]) -> str:
    return ", ".join(f"{n} {state}" for state, n in sorted(states.items())) or "no jobs"


def render(outcomes: Outcomes) -> str:
    command = "python -m bench.budgets" + (" --scaled" if outcomes.scale_name == "scaled" else " --write")
    subagents = sum(1 for ended in outcomes.jobs.values() if ended[0] is not None)
    lines = [
        "# Budgets in money on a fleet of workers, under faults",
        "",
        header(command),
        "",
        f"{outcomes.scale_name} run: {len(outcomes.tenants)} tenants, {len(outcomes.planned)} main jobs and "
        f"{subagents} subagents, {outcomes.workers} worker(s) x {outcomes.processes} processes; {outcomes.steps} "
        f"charges; every job ended: {'yes' if outcomes.ended_all else 'NO'} after {outcomes.run_seconds:.0f} s "
        f"({outcomes.wall_seconds:.0f} s with setting up).",
        "",
        *(f"- {fault}" for fault in outcomes.faults),
        "",
        "## Jobs",
        "",
        _jobs_table(outcomes),
        "",
        "## The ledger against the emulator's billing log",
        "",
        _ledger_table(outcomes),
        "",
        _kinds_table(outcomes),
        "",
        "## Budgets",
        "",
        _budgets_table(outcomes),
        "",
        "## Wind-down against hard stop, same documents, same budget",
        "",
        _pairs_table(outcomes),
        "",
        "## Reservation time per step",
        "",
        _timing_table(outcomes),
        "",
        "## Goals",
        "",
        render_goals(goals(outcomes)),
    ]
    return "\n".join(lines) + "\n"


def _jobs_table(outcomes: Outcomes) -> str:
    role = {job.job_id: job.role for job in outcomes.planned}
    states: Counter[tuple[str, str]] = Counter()
    for job_id, (parent, _, status, _, _) in outcomes.jobs.items():
        kind = role.get(job_id) or (f"subagent of {role.get(parent)}" if parent else "other")
        states[kind, status] += 1
    unfinished = {str(s) for s in UNFINISHED}
    return table(
        ["jobs", "state", "count"],
        [
            [kind, f"{status}{' (unfinished)' if status in unfinished else ''}", n]
            for (kind, status), n in sorted(states.items())
        ],
    )


def _ledger_table(outcomes: Outcomes) -> str:
    comparison = compare(outcomes)
    rows = [
        [f"tenant {tenant_id}", f"{ledger:.6f}", f"{billed:.6f}", _pct(Comparison.off((ledger, billed)))]
        for tenant_id, (ledger, billed) in sorted(comparison.per_tenant.items())
    ]
    rows.append(["worst of the jobs", "", "", _pct(comparison.worst(comparison.per_job))])
    rows.append([f"billed, no charge names it ({comparison.unmatched})", "", f"{comparison.unmatched_usd:.6f}", ""])
    return table(["", "ledger USD", "billed USD", "off by"], rows)


def _kinds_table(outcomes: Outcomes) -> str:
    count: Counter[str] = Counter()
    usd: dict[str, Decimal] = defaultdict(Decimal)
    for _, _, _, kind, amount, _, _ in outcomes.charges:
        count[kind] += 1
        usd[kind] += amount
    total = sum(usd.values(), Decimal(0)) or Decimal(1)
    rows = [[kind, count[kind], f"{usd[kind]:.6f}", _pct(usd[kind] / total)] for kind in sorted(count)]
    return table(["charge kind", "charges", "USD", "share"], rows)


def _budgets_table(outcomes: Outcomes) -> str:
    spent = family_spend(outcomes)
    rows: list[list[object]] = []
    for role in dict.fromkeys(job.role for job in outcomes.planned):
        jobs = [job for job in outcomes.planned if job.role == role]
        if jobs:
            most = max(spent[j.job_id] / j.max_cost_usd for j in jobs)
            rows.append([f"{role} jobs ({len(jobs)})", f"{jobs[0].max_cost_usd} each", f"{most * 100:.1f} % (most)"])
    for (tenant_id, day), usd in sorted(tenant_days(outcomes).items()):
        rows.append([f"tenant {tenant_id}, {day}", f"{final_day_limit(outcomes, tenant_id)}", f"{usd:.4f}"])
    waited = outcomes.waited
    if waited:
        rows.append(["tight day when raised (ledger)", f"{waited.limit}", f"{waited.ledger:.4f}"])
        rows.append(["  (Redis: spent + held)", f"{waited.limit}", f"{waited.spent + waited.held:.4f}"])
    stops, false = money_stops(outcomes)
    rows.append(["stops for money", "", f"{len(stops)} ({len(false)} false)"])
    lines = [table(["budget", "limit USD", "spent"], rows)]
    if waited:
        after = _states(tight_tenant(outcomes)[0])
        lines += ["", f"The tight day held {waited.jobs} job(s) waiting at {waited.at:.0f} s; raised to "
                  f"{waited.raised_to} USD then. Its jobs afterwards: {after}."]  # fmt: skip
    shown = [*(f"overshoot: {o}" for o in overshoots(outcomes)), *(f"FALSE STOP: {f}" for f in false)]
    shown += [f"stop: {stop}" for stop in stops[:STOPS_SHOWN] if stop not in false]
    if outcomes.stranded:
        shown.append(
            "unfinished at the end, their step taken by a worker and not acknowledged (waiting for a countdown in a "
            "live worker, or taken by the killed one: Redis gives those back only after the broker's visibility "
            f"timeout): jobs {sorted(outcomes.stranded)}"
        )
    return "\n".join([*lines, "", *(f"- {line}" for line in shown)])


def _pairs_table(outcomes: Outcomes) -> str:
    spent = family_spend(outcomes)
    rows = []
    for how in ("alone", "subagents"):
        for told, cut in pairs(outcomes, how):
            row: list[object] = [how, len(told.texts), f"{told.max_cost_usd}"]
            for job in (told, cut):
                ended = outcomes.jobs[job.job_id][2]
                mine = covered(outcomes, job)
                theirs = f" ({subagents_covered(outcomes, job)} in its subagents' answers)" if how != "alone" else ""
                row += [ended, f"{mine}{theirs}", f"{spent[job.job_id]:.4f}"]
            rows.append(row)
    header_ = ["pair", "documents", "budget USD", "wound down", "covered", "spent", "hard stop", "covered", "spent"]
    return table(header_, rows)


def _timing_table(outcomes: Outcomes) -> str:
    times = sorted(outcomes.reservation_ms)
    if not times:
        return "not measured"
    p95 = times[min(len(times) - 1, round(0.95 * len(times)))]
    return table(
        ["calls per step", "steps timed", "median ms", "p95 ms", "mean ms"],
        [["standing + reserve (3 scopes) + settle", len(times), f"{statistics.median(times):.2f}", f"{p95:.2f}",
          f"{statistics.fmean(times):.2f}"]],
    )  # fmt: skip
