"""The chaos run's figures, and issue 8's goals marked met or NOT MET, as Markdown."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence

from bench.chaos_result import ChaosResult
from bench.goals import RECOVERY_GOAL_SECONDS, Goal, render_goals
from bench.provenance import header
from bench.report import table
from models.statuses import JobStatus

# Sentry event types that are about a too-long request (the SDK reports the exception's class name).
TOO_LONG_KINDS = ("TooLong",)


def goals(result: ChaosResult) -> list[Goal]:
    checks = result.checks
    recovery = result.recovery_seconds
    too_long_rejections = sum(
        n for kind, n in result.emulator_rejections.items() if kind in ("too_long", "too_long_with_max_tokens")
    )
    too_long_events = sum(n for kind, n in result.sentry.items() if kind in TOO_LONG_KINDS)
    failed = sum(n for state, n in checks.jobs_by_state.items() if state == JobStatus.FAILED)
    events = sum(result.sentry.values())
    return [
        Goal("0 jobs stuck", not checks.stuck, f"{len(checks.stuck)} stuck"),
        Goal(
            "0 jobs lost",
            not checks.lost and result.submit_failures == 0,
            f"{len(checks.lost)} lost, {result.submit_failures} submissions failed",
        ),
        Goal(
            "0 messages lost or duplicated (numbers contiguous per job)",
            checks.messages_missing == 0 and checks.messages_duplicated == 0 and checks.steps_missing == 0,
            f"{checks.messages_missing} missing, {checks.messages_duplicated} duplicated, "
            f"{checks.steps_missing} step records missing",
        ),
        Goal(
            f"every job ended within {RECOVERY_GOAL_SECONDS:.0f} s of the last fault",
            recovery is not None and recovery <= RECOVERY_GOAL_SECONDS,
            "never (bound reached)" if recovery is None else f"{recovery:.1f} s",
        ),
        Goal(
            "jobs not meant to fail succeed, notes matching their documents",
            not checks.unexpected_end and not checks.notes_wrong and not checks.stuck,
            f"{len(checks.unexpected_end)} ended otherwise, {len(checks.notes_wrong)} with wrong notes",
        ),
        Goal(
            "too long: 1 notice, 0 retries, 0 Sentry events",
            checks.too_long_ok == checks.too_long_jobs == result.config.too_long_jobs
            and too_long_rejections == checks.too_long_jobs
            and too_long_events == 0,
            f"{checks.too_long_ok} of {checks.too_long_jobs} right, {too_long_rejections} too-long rejections, "
            f"{too_long_events} events",
        ),
        Goal(
            "retried faults are not Sentry events (at most 1 per failed job)",
            events <= failed,
            f"{events} events, {failed} failed jobs",
        ),
    ]


def figures(result: ChaosResult) -> list[tuple[str, str]]:
    checks = result.checks
    config = result.config
    faults = Counter(f.kind for f in result.faults)
    recovery = result.recovery_seconds
    return [
        ("code", result.code),
        ("broker", config.broker),
        ("workers × pool processes", f"{config.workers} × 2"),
        ("main jobs submitted", f"{len(result.submitted)} ({sum(s.too_long for s in result.submitted)} too long)"),
        ("subagent jobs", str(checks.subagents)),
        ("jobs ended, by state", _states(checks.jobs_by_state)),
        ("main jobs, by state", _states(checks.main_by_state)),
        ("stuck (not ended)", str(len(checks.stuck))),
        ("lost (no job in the database)", str(len(checks.lost) + result.submit_failures)),
        ("messages stored", f"{checks.messages:,}"),
        ("messages missing / duplicated", f"{checks.messages_missing} / {checks.messages_duplicated}"),
        ("step records / missing", f"{checks.step_records:,} / {checks.steps_missing}"),
        ("faults injected", ", ".join(f"{kind} ×{n}" for kind, n in faults.items()) or "none"),
        ("worker exits on their own (restarted as compose would)", str(result.worker_exits)),
        ("model requests / faults the emulator injected", _rejections(result)),
        ("transient retries recorded on jobs", str(checks.retries)),
        ("billed (ledger)", str(result.paid) if result.paid else "not read"),
        ("fault window / last fault at", f"{config.seconds:.0f} s / {result.last_fault:.1f} s"),
        (
            "last fault → every job ended",
            f"not within {config.settle_seconds:.0f} s" if recovery is None else f"{recovery:.1f} s",
        ),
        ("Sentry events by kind", ", ".join(f"{k} ×{n}" for k, n in sorted(result.sentry.items())) or "none"),
        ("wall time", f"{result.wall_seconds:.0f} s"),
    ]


def render(result: ChaosResult) -> str:
    lines = [table(["", ""], figures(result)), "", render_goals(goals(result))]
    if result.checks.problems:
        lines += ["", "Problems (first 20):", *(f"- {p}" for p in result.checks.problems[:20])]
    return "\n".join(lines)


def results_markdown(results: Sequence[ChaosResult], *, command: str, earlier: str | None = None) -> str:
    """The report; ``earlier`` is another run's report (e.g. the same harness on an older commit), appended with
    its headings moved one level down."""
    parts = [
        "# Chaos: every job ends?",
        "",
        header(command),
        "",
        "Own PostgreSQL and Redis on spare ports (Redis without persistence); RabbitMQ",
        "is the shared server with a queue of the run's own, never restarted. Workers: `celery worker -P prefork",
        "-c 2`, each in its own process group, plus `celery beat`; a worker that exits on its own is started again",
        "a second later, as compose's `restart: unless-stopped` would. The emulator adds the latency below to every",
        "model call and answers a share of them with 429, 529, 500 or a dropped connection, until the fault window",
        "ends; the harness kill -9's pool children and worker main processes (restarted after 3–6 s), restarts",
        "Redis and stops PostgreSQL for 10–15 s at seeded random moments, then waits (bounded) for every job to",
        "end and checks each from the database: final state, messages numbered 0..n-1 once each, step records",
        "1..n, unique tool_use ids, a subagent for every delegate call, and notes carrying each document's sha256.",
        "Then the model's limit shrinks below what Plimsoll learned of it and a few more jobs are submitted: each",
        "must end `needs_new_chat` with one notice after one rejected request, and no Sentry event.",
        "",
    ]
    for result in results:
        config = result.config
        faults = result.faults
        parts += [
            f"## {config.broker}",
            "",
            f"{config.jobs} jobs (even ones 6 documents → 2 subagents, odd ones 3) and {config.too_long_jobs} too "
            f"long after the chaos, seed {config.seed}, emulator "
            f"latency {config.latency} s and faults {config.fault_rate:.0%}, lease {config.lease_seconds} s, "
            f"reconciler every {config.reconcile_every_seconds} s (settings the code may ignore).",
            "",
            table(["", ""], figures(result)),
            "",
            render_goals(goals(result)),
            "",
            "Faults, in order (seconds after the window opened):",
            "",
            table(["at", "fault", "back at", "detail"], [(f.started, f.kind, f.ended, f.detail) for f in faults]),
            "",
        ]
        if result.checks.problems:
            parts += ["Problems (first 20):", "", *(f"- {p}" for p in result.checks.problems[:20]), ""]
    if earlier:
        lines = [line for line in earlier.splitlines() if not line.startswith("# ")]  # without its title
        parts += ["## Earlier run", "", *("#" + line if line.startswith("#") else line for line in lines)]
    return "\n".join(parts) + "\n"


def _states(states: Counter[str]) -> str:
    return ", ".join(f"{state} {n}" for state, n in sorted(states.items())) or "none"


def _rejections(result: ChaosResult) -> str:
    injected = {k: n for k, n in result.emulator_rejections.items() if not k.startswith("too_long")}
    details = ", ".join(f"{k} ×{n}" for k, n in sorted(injected.items()))
    return f"{result.emulator_requests:,} / {sum(injected.values())}" + (f" ({details})" if details else "")
