"""Following a job in the terminal: a live panel while it runs, then its answer or its notice."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

from rich.console import Console, RenderableType
from rich.live import Live
from rich.panel import Panel
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from api.client import ApiUnreachable, EventsRefused, PlimsollClient
from api.schemas import JobView
from cli.common import model_shown, usd
from models.statuses import JobStatus

STATUS_STYLES = {  # the unfinished ones: cyan
    JobStatus.SUCCEEDED: "green",
    JobStatus.INCOMPLETE: "yellow",
    JobStatus.FAILED: "red",
    JobStatus.NEEDS_NEW_CHAT: "yellow",
    JobStatus.CANCELLED: "dim",
}


def watch_job(
    client: PlimsollClient,
    job_id: int,
    *,
    display: Console,
    output: Console,
    interval: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> int:
    """Follow the job until it finishes, showing its progress on ``display``; then print the final answer (or the
    notice, or the error) on ``output``. Answers the exit code: 0 if the job succeeded, 1 otherwise (an
    incomplete job's answer is printed too, and its notice names the parts that did not finish)."""
    job = client.job(job_id)
    with Live(job_panel(job), console=display, refresh_per_second=4) as live:
        for seen, problem in updates(client, job, interval=interval, sleep=sleep):
            job = seen
            live.update(job_panel(job, problem=problem))
    return report_outcome(client, job, display=display, output=output)


def updates(
    client: PlimsollClient, job: JobView, *, interval: float, sleep: Callable[[float], None] = time.sleep
) -> Iterator[tuple[JobView, str | None]]:
    """The job as it is after each of its events, until it has ended: its event stream followed from the view's
    latest event, and resumed after the last one received when the connection is lost (the API restarting must
    not end the watch). Polled every ``interval`` seconds only where the API has no streams. Each comes with the
    problem to show, if any."""
    last = job.last_event_id
    while not job.status.finished:
        try:
            for event in client.job_events(job.id, after=last):
                last = event.id
                job = client.job(job.id)
                yield job, None
            job = client.job(job.id)  # the stream ends with the job (or had nothing more to tell of it)
            yield job, None
        except EventsRefused:
            yield from _polled(client, job, interval=interval, sleep=sleep)
            return
        except ApiUnreachable as error:
            yield job, f"{error}; trying again"
            sleep(interval)


def _polled(
    client: PlimsollClient, job: JobView, *, interval: float, sleep: Callable[[float], None]
) -> Iterator[tuple[JobView, str | None]]:
    while not job.status.finished:
        sleep(interval)
        try:
            job = client.job(job.id)
        except ApiUnreachable as error:
            yield job, f"{error}; trying again"
            continue
        yield job, None


def report_outcome(client: PlimsollClient, job: JobView, *, display: Console, output: Console) -> int:
    if job.status in (JobStatus.SUCCEEDED, JobStatus.INCOMPLETE):
        output.print(job.final_answer or "", markup=False, highlight=False, soft_wrap=True)
    if job.status == JobStatus.SUCCEEDED:
        return 0
    notices = [notice.text for notice in client.all_notices(job_id=job.id)]
    if job.status == JobStatus.NEEDS_NEW_CHAT:
        for text in notices or [job.error or f"Job {job.id} needs a new chat."]:
            output.print(text, markup=False, highlight=False, soft_wrap=True)
        return 1
    if job.status in (JobStatus.FAILED, JobStatus.INCOMPLETE):
        for text in notices or [f"Job {job.id} {job.status}: {job.error or 'no reason recorded'}"]:
            display.print(text, markup=False, highlight=False, soft_wrap=True)
        return 1
    display.print(f"Job {job.id} was cancelled.")
    return 1


def job_panel(job: JobView, *, problem: str | None = None) -> Panel:
    rows = Table.grid(padding=(0, 2))
    rows.add_column(style="bold", no_wrap=True)
    rows.add_column()
    rows.add_row("Status", Text(job.status, style=STATUS_STYLES.get(job.status, "cyan")))
    # Steps done, not the step under way: the count `steps`, the API (progress.steps_done, last_request.step)
    # and Flower's finished rows give; Flower's running row names the step after it.
    rows.add_row("Steps done", f"{job.progress.steps_done:,}")
    rows.add_row("Last request", _last_request(job))
    if job.last_request is not None:
        cleared, dropped = job.last_request.cleared, job.last_request.dropped
        left_out = f", {dropped:,} old messages left out" if dropped else ""
        rows.add_row("Cleared", f"{cleared:,} tool results{left_out}")
    if job.cost is not None:
        rows.add_row("Cost", _cost(job))
    share, ratio = job.usage.cache_read_share, job.usage.cost_vs_uncached
    reads = "–" if share is None else f"{share:.0%} of input tokens"
    rows.add_row("Cache reads", reads if ratio is None else f"{reads} · {_cache_effect(ratio)}")
    read, total = len(job.progress.documents_read), job.progress.documents_total
    rows.add_row("Documents read", f"{read:,} of {total:,}")
    if (now := job.progress.reading) is not None:
        pages = (
            f", page {now.page:,}" + (f" of about {now.pages:,}" if now.pages else "") if now.characters_from else ""
        )
        rows.add_row("Reading", f"doc {now.document_number:,} of {total:,} ({now.document}){pages}")
    left = time_left(job, datetime.now(UTC))
    if left is not None:
        rows.add_row("Time left", f"about {_duration(left)} (at the pace of the documents read so far)")
    if job.children:
        counts = Counter(child.status for child in job.children)
        rows.add_row("Subagents", ", ".join(f"{n} {status}" for status, n in sorted(counts.items())))
        for child in job.children:
            style = STATUS_STYLES.get(child.status, "cyan")
            line = Text.assemble(("  ", ""), (child.status, style), f" · {child.steps_done:,} steps")
            if child.error:
                line.append(f" · {child.error}", style="dim")
            rows.add_row(f"  subagent {child.id}", line)
    if problem:
        rows.add_row("", Text(problem, style="yellow"))
    title = f"Job {job.id} · {model_shown(job.model, job.emulator)} (limit {job.hard_limit:,} tokens)"
    return Panel(rows, title=title, title_align="left", expand=False)


def _cost(job: JobView) -> str:
    """The job's dollars, its subagents' share and the kinds that are not plain steps."""
    assert job.cost is not None
    parts = [usd(job.cost.total_usd)]
    subagents = sum(line.total_usd for line in job.cost.jobs if line.kind == "subagent")
    if subagents:
        parts.append(f"{usd(subagents)} of it by subagents")
    parts += [f"{usd(job.cost.by_kind[k])} {k}" for k in ("compaction", "replan", "wasted") if job.cost.by_kind.get(k)]
    return " · ".join(parts)


def _cache_effect(ratio: float) -> str:
    """The prompt cache's effect on the input's price: a ratio over 1 means its writes cost more than its reads
    saved so far, not that the job cost more than it should."""
    if ratio <= 1:
        return f"input {1 - ratio:.0%} cheaper than uncached"
    return f"cache writes so far cost {ratio - 1:.0%} more than they saved"


def time_left(job: JobView, now: datetime) -> timedelta | None:
    """How long the documents not yet read should take at the pace of those read so far; None before the
    first is read, once all are, or when the job has ended."""
    read, total = len(job.progress.documents_read), job.progress.documents_total
    if job.status.finished or job.started_at is None or not 0 < read < total:
        return None
    elapsed = now - job.started_at
    return elapsed / read * (total - read)


def _duration(span: timedelta) -> str:
    seconds = int(span.total_seconds())
    if seconds < 90:
        return f"{seconds} s"
    if seconds < 90 * 60:
        return f"{round(seconds / 60)} min"
    return f"{seconds / 3600:.1f} h"


def _last_request(job: JobView) -> RenderableType:
    last = job.last_request
    if last is None:
        return Text("none yet", style="dim")
    tokens = last.reported_input_tokens if last.reported_input_tokens is not None else last.estimated_tokens
    bar = Table.grid(padding=(0, 1))
    bar.add_row(
        ProgressBar(total=job.budget, completed=min(tokens, job.budget), width=30), f"{tokens / job.budget:.0%}"
    )
    lines = Table.grid()
    lines.add_row(bar)
    lines.add_row(f"{tokens:,} of {job.budget:,} budget tokens · step {last.step:,} · stage {last.stage}")
    return lines
