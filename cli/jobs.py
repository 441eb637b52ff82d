"""Jobs: submit, watch, jobs, cancel, hold, release, steps, messages."""

from __future__ import annotations

import codecs
import contextlib
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from cli.common import (
    DEFAULT_API_URL,
    PAGE_SIZE,
    AllowRetiredModel,
    ApiKey,
    ApiUrl,
    ChosenCompaction,
    ChosenStrategy,
    Interval,
    JobId,
    Json,
    Limit,
    MaxCostUsd,
    Offset,
    api,
    consoles,
    fail,
    job_options,
    model_shown,
    plain,
    print_json,
    table,
    usage_error,
    usd,
)
from models.statuses import JobStatus, Strategy

if TYPE_CHECKING:
    from rich.console import Console

    from api.client import PlimsollClient
    from api.schemas import DocumentsCreated, JobIn, JobView, MessageView, SummaryView

app = typer.Typer()

UTF8_BOM = codecs.BOM_UTF8

SHOWN_CHARS = 2_000  # of one message block, in the terminal; --json has everything


def exit_code(job: JobView) -> int:
    """0 if the job succeeded; 1 if it failed, needs a new chat, is incomplete or was cancelled."""
    return 0 if job.status == JobStatus.SUCCEEDED else 1


@app.command()
def submit(
    files: Annotated[
        list[Path],
        typer.Argument(exists=True, dir_okay=False, readable=True, help="UTF-8 text files the job may read."),
    ],
    instruction: Annotated[str, typer.Option("--instruction", "-i", help="What the agent should do.")],
    api_key: ApiKey = "",
    model: Annotated[str | None, typer.Option(help="A model of the catalogue (default: the server's).")] = None,
    budget: Annotated[int | None, typer.Option(help="Input tokens per request (default: the model's).")] = None,
    locale: Annotated[
        str | None, typer.Option(help="The language of the notices, e.g. en or cs (default: the server's).")
    ] = None,
    strategy: ChosenStrategy = Strategy.PLIMSOLL,
    safety_net: Annotated[
        bool, typer.Option("--safety-net/--no-safety-net", help="Tell the agent that old tool results are cleared.")
    ] = True,
    compaction: ChosenCompaction = None,
    max_steps: Annotated[int | None, typer.Option(help="Stop the job after this many steps.")] = None,
    max_input_tokens: Annotated[
        int | None, typer.Option(help="Stop the job before its requests add up to more input tokens.")
    ] = None,
    max_cost_usd: MaxCostUsd = None,
    wind_down: Annotated[
        bool,
        typer.Option(
            "--wind-down/--no-wind-down",
            help="Tell the agent what is left when its budget nears its end (off: where the operator allows).",
        ),
    ] = True,
    allow_retired_model: AllowRetiredModel = False,
    wait: Annotated[bool, typer.Option("--wait", help="Watch the job until it finishes.")] = False,
    interval: Interval = 1.0,
    as_json: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """Check the job, upload FILES, create the job over them, and print its id.

    A job the API refuses leaves no new document behind."""
    from pydantic import ValidationError

    from api.schemas import JobIn

    err = consoles()[1]
    try:
        job = JobIn(instruction=instruction, **job_options(locals()))
    except ValidationError as error:
        usage_error(error)
    with api(api_url, api_key) as client:
        check = client.check_job(job)  # before anything is uploaded: nothing to clean up when it is refused
        for path in files:
            if (over := over_the_limit(path, check.max_document_chars)) is not None:
                fail(over)
        uploaded = client.upload(files)
        created = _create(client, job.model_copy(update={"document_ids": [d.id for d in uploaded.documents]}), uploaded)
        again = f" ({len(uploaded.reused)} stored already)" if uploaded.reused else ""
        plain(
            err,
            f"Job {created.id} queued: {count(len(uploaded.documents), 'document')}{again}, "
            f"{model_shown(created.model, created.emulator)}, "
            f"budget {created.budget:,} tokens.",
        )
        for warning in created.warnings:
            plain(err, f"Warning: {warning}", style="yellow")
        follow(client, created, wait=wait, as_json=as_json, interval=interval)


def over_the_limit(path: Path, max_chars: int) -> str | None:
    """Why the file cannot be a document, if it has more characters than one may have; None if it is within.
    Told from its size where that is enough (UTF-8 takes one to four bytes a character), otherwise counted:
    a file of 50 MB is refused at once, not read and sent."""
    size = path.stat().st_size
    if size <= max_chars:
        return None
    limit = f"the limit is {max_chars:,} characters per document: split it into parts of at most that"
    if size > 4 * max_chars + len(UTF8_BOM):
        return f"{str(path)!r} has {size:,} bytes, so more than {(size - len(UTF8_BOM)) // 4:,} characters; {limit}"
    chars = len(path.read_bytes().removeprefix(UTF8_BOM).decode("utf-8", errors="replace"))
    return f"{str(path)!r} has {chars:,} characters; {limit}" if chars > max_chars else None


def follow(client: PlimsollClient, created: JobView, *, wait: bool, as_json: bool, interval: float) -> None:
    """After a job was created: print its id (or, with --json, the job), and with --wait follow it to its end
    and exit with its exit code."""
    if as_json and not wait:
        print_json(created)
        return
    if not as_json:
        plain(consoles()[0], str(created.id))
    if wait:
        follow_to_the_end(client, created.id, as_json=as_json, interval=interval)


def follow_to_the_end(client: PlimsollClient, job_id: int, *, as_json: bool, interval: float) -> NoReturn:
    """Watch the job until it finishes (with --json, quietly, then print it) and exit with its exit code; a
    Ctrl-C stops the watching, not the job: exit code 130, and a line saying so."""
    from cli.watch import watch_job

    out, err = consoles()
    try:
        if as_json:
            finished = wait_quietly(client, job_id, interval=interval)
            print_json(finished)
            code = exit_code(finished)
        else:
            code = watch_job(client, job_id, display=err, output=out, interval=interval)
    except KeyboardInterrupt:
        plain(err, f"Stopped watching; job {job_id} goes on.")
        raise typer.Exit(130) from None
    raise typer.Exit(code)


def _create(client: PlimsollClient, job: JobIn, uploaded: DocumentsCreated) -> JobView:
    """The job; if the API refuses it after all, the documents this upload added are deleted again."""
    from api.client import ClientError

    try:
        return client.submit_job(job)
    except ClientError:
        for document in uploaded.documents:
            if document.id not in uploaded.reused:
                # The refusal is what the person needs to read; a document left over is harmless.
                with contextlib.suppress(ClientError):
                    client.delete_document(document.id)
        raise


def wait_quietly(client: PlimsollClient, job_id: int, *, interval: float) -> JobView:
    """Follow the job until it finishes, showing nothing (for --json)."""
    from cli.watch import updates

    job = client.job(job_id)
    for seen, _problem in updates(client, job, interval=interval):
        job = seen
    return job


@app.command()
def watch(job: JobId, api_key: ApiKey = "", interval: Interval = 1.0, as_json: Json = False,
          api_url: ApiUrl = DEFAULT_API_URL) -> None:  # fmt: skip
    """Follow a job until it finishes, then print its answer or its notice (exit code 0 only if it succeeded)."""
    with api(api_url, api_key) as client:
        follow_to_the_end(client, job, as_json=as_json, interval=interval)


@app.command("jobs")
def list_jobs(
    api_key: ApiKey = "",
    status: Annotated[JobStatus | None, typer.Option(help="Only jobs in this status.")] = None,
    subagents: Annotated[bool, typer.Option("--subagents", help="Also the subagents' jobs.")] = False,
    offset: Offset = 0,
    limit: Limit = 20,
    as_json: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """The tenant's jobs, newest first."""
    out, err = consoles()
    with api(api_url, api_key) as client:
        kind = None if subagents else "main"
        page = client.jobs(kind=kind, status=status.value if status else None, offset=offset, limit=limit)
    if as_json:
        print_json(page)
        return
    if not page.items:
        plain(err, "No jobs." if page.total == 0 else f"No jobs past {offset:,} of {page.total:,}.")
        return
    listing = table("id", "status", "model", "steps", "cost", "created (UTC)", "instruction")
    for job in page.items:
        parent = f" (of {job.parent_id})" if job.parent_id else ""
        model = model_shown(job.model, job.emulator)
        cost = "–" if job.cost_usd is None else usd(job.cost_usd)
        listing.add_row(
            f"{job.id}{parent}", job.status, model, f"{job.steps_done:,}", cost, f"{job.created_at:%Y-%m-%d %H:%M}",
            job.instruction_excerpt,
        )  # fmt: skip
    out.print(listing)
    _more(err, shown=len(page.items), offset=offset, total=page.total)


@app.command()
def cancel(job: JobId, api_key: ApiKey = "", as_json: Json = False, api_url: ApiUrl = DEFAULT_API_URL) -> None:
    """Cancel a queued or running job and its unfinished subagents."""
    _out, err = consoles()
    with api(api_url, api_key) as client:
        cancelled = client.cancel(job)
    if as_json:
        print_json(cancelled)
    else:
        plain(err, f"Job {cancelled.id} cancelled.")


@app.command()
def hold(job: JobId, api_key: ApiKey = "", as_json: Json = False, api_url: ApiUrl = DEFAULT_API_URL) -> None:
    """Keep a job's history (its subagents' too) whatever the tenant's retention policy, until released."""
    _out, err = consoles()
    with api(api_url, api_key) as client:
        held = client.hold(job)
    if as_json:
        print_json(held)
    else:
        plain(err, f"Job {held.id}'s history is held: no retention sweep purges it until plimsoll release {held.id}.")


@app.command()
def release(job: JobId, api_key: ApiKey = "", as_json: Json = False, api_url: ApiUrl = DEFAULT_API_URL) -> None:
    """Give a held job's history back to the tenant's retention policy."""
    _out, err = consoles()
    with api(api_url, api_key) as client:
        released = client.release(job)
    if as_json:
        print_json(released)
    else:
        plain(err, f"Job {released.id}'s history is under the tenant's retention policy again.")


@app.command()
def steps(
    job: JobId,
    api_key: ApiKey = "",
    offset: Offset = 0,
    limit: Limit = PAGE_SIZE,
    as_json: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """What each step of a job sent: the fitting stage, tokens estimated and reported, results cleared."""
    out, err = consoles()
    with api(api_url, api_key) as client:
        page = client.steps(job, offset=offset, limit=limit)
    if as_json:
        print_json(page)
        return
    if not page.items:
        plain(err, f"Job {job} has no steps{' there' if page.total else ' yet'}.")
        return
    columns = ("step", "stage", "estimated", "reported", "planning budget", "cleared", "dropped", "stop")
    listing = table(*columns)
    for step in page.items:
        reported = "–" if step.reported_input_tokens is None else f"{step.reported_input_tokens:,}"
        summary = step.summary
        stage = step.stage if summary is None else f"{step.stage} of {summary.first_seq}–{summary.last_seq}"
        listing.add_row(
            str(step.step), stage, f"{step.estimated_tokens:,}", reported, f"{step.planning_budget:,}",
            str(len(step.cleared)), str(step.dropped), step.stop_reason or "–",
        )  # fmt: skip
    out.print(listing)
    if page.items[0].emulator:
        plain(err, f"Job {job} was answered by the bundled emulator, not a real provider.")
    _more(err, shown=len(page.items), offset=offset, total=page.total)


@app.command()
def messages(
    job: JobId,
    api_key: ApiKey = "",
    offset: Offset = 0,
    limit: Limit = 20,
    summary: Annotated[
        int | None,
        typer.Option(help="The summary that compaction step STEP wrote, then the stored messages it covers."),
    ] = None,
    as_json: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """A job's stored conversation, in order, a page at a time.

    Long blocks are shortened; --json has them whole."""
    out, err = consoles()
    with api(api_url, api_key) as client:
        written = None if summary is None else _summary_of(client, job, summary)
        first = offset if written is None else written.first_seq + offset  # --summary: offsets from its first
        if written is not None:
            limit = max(0, min(limit, written.last_seq - first + 1))
        page = client.messages(job, offset=first, limit=limit)
    if written is not None and not as_json:
        out.print(
            f"summary of #{written.first_seq}–#{written.last_seq} · step {summary}", style="bold", highlight=False
        )
        plain(out, written.content)
        out.print()
    if as_json:
        print_json(page)
        return
    for message in page.items:
        out.print(f"#{message.seq} · step {message.step} · {message.role}", style="bold", highlight=False)
        for line in message_lines(message):
            plain(out, line)
        out.print()
    if not page.items:
        plain(err, f"Job {job} has no messages{' there' if page.total else ''}.")
        return
    # Messages are numbered by their place in the job (#0, the instruction, is --offset 0), here as in the API.
    last = page.items[-1].seq
    end = page.total - 1 if written is None else min(written.last_seq, page.total - 1)
    if last < end:
        whole = f"#{0 if written is None else written.first_seq}–#{end}"
        again = "" if summary is None else f" --summary {summary}"
        shown = f"#{first}" if first == last else f"#{first}–#{last}"
        plain(err, f"{shown} of {whole}; the next page:{again} --offset {offset + len(page.items)}")


def _summary_of(client: PlimsollClient, job: int, step: int) -> SummaryView:
    """The summary compaction step ``step`` of ``job`` wrote; exit 1 saying so if it wrote none."""
    offset = 0
    while True:
        page = client.steps(job, offset=offset, limit=100)
        found = [s.summary for s in page.items if s.step == step and s.summary is not None]
        if found:
            return found[0]
        offset += len(page.items)
        if not page.items or offset >= page.total:
            plain(consoles()[1], f"Step {step} of job {job} wrote no summary.")
            raise typer.Exit(1)


def message_lines(message: MessageView) -> list[str]:
    if isinstance(message.content, str):
        return [_shortened(message.content)]
    return [_block_line(block) for block in message.content]


def _block_line(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return _shortened(str(block.get("text", "")))
    if kind == "tool_use":
        arguments = json.dumps(block.get("input", {}), ensure_ascii=False)
        return f"[tool_use {block.get('id', '')}] {block.get('name', '')}({_shortened(arguments)})"
    if kind == "tool_result":
        content = block.get("content", "")
        if isinstance(content, list):
            content = "\n".join(str(part.get("text", "")) for part in content if isinstance(part, dict))
        return f"[tool_result {block.get('tool_use_id', '')}] {_shortened(str(content))}"
    return _shortened(json.dumps(block, ensure_ascii=False))


def count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"


def _shortened(text: str) -> str:
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}… ({len(text) - SHOWN_CHARS:,} more characters; --json shows all)"


def _more(err: Console, *, shown: int, offset: int, total: int) -> None:
    if offset + shown < total:
        plain(err, f"{offset + 1:,}–{offset + shown:,} of {total:,}; the next page: --offset {offset + shown}")
