"""The API's side of the ``plimsoll`` command: submit, watch, notices, api, tenant create.

Results go to standard output (a job id, an answer, notices); progress and messages to standard error."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, NoReturn

import typer
import uvicorn
from rich.console import Console
from sqlalchemy.exc import SQLAlchemyError

from api.client import DEFAULT_API_URL, ClientError, PlimsollClient
from api.watch import watch_job
from models.db import Database, get_database
from models.errors import InvalidInput
from models.tenants import create_tenant

app = typer.Typer(help="Submit and follow Plimsoll jobs through its API.", no_args_is_help=True)
tenant_app = typer.Typer(help="Tenants and their API keys (works on the database directly).", no_args_is_help=True)
app.add_typer(tenant_app, name="tenant")

ApiUrl = Annotated[str, typer.Option("--api-url", envvar="PLIMSOLL_API_URL", help="The Plimsoll API.")]
ApiKey = Annotated[
    str, typer.Option("--api-key", envvar="PLIMSOLL_API_KEY", help="The tenant's API key.", show_default=False)
]
Interval = Annotated[float, typer.Option("--interval", min=0.01, help="Seconds between two looks at the job.")]


def _consoles() -> tuple[Console, Console]:
    """(standard output, standard error), looked up at each call so that redirection in tests is seen."""
    return Console(), Console(stderr=True)


def _fail(message: str) -> NoReturn:
    Console(stderr=True).print(f"[red]Error:[/red] {message}", highlight=False, soft_wrap=True, markup=True)
    raise typer.Exit(1)


@app.command()
def submit(
    files: Annotated[
        list[Path],
        typer.Argument(exists=True, dir_okay=False, readable=True, help="UTF-8 text files the job may read."),
    ],
    instruction: Annotated[str, typer.Option("--instruction", "-i", help="What the agent should do.")],
    api_key: ApiKey,
    model: Annotated[str | None, typer.Option(help="A model of the catalogue (default: the server's).")] = None,
    budget: Annotated[int | None, typer.Option(help="Input tokens per request (default: the model's).")] = None,
    wait: Annotated[bool, typer.Option("--wait", help="Watch the job until it finishes.")] = False,
    interval: Interval = 1.0,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """Upload FILES, create a job over them, and print its id."""
    out, err = _consoles()
    try:
        with PlimsollClient(api_url, api_key) as client:
            documents = client.upload_files(files)
            job = client.create_job(instruction, [d.id for d in documents], model=model, budget=budget)
            err.print(
                f"Job {job.id} queued: {len(documents)} documents, {job.model}, budget {job.budget:,} tokens.",
                highlight=False,
            )
            for warning in job.warnings:
                err.print(f"Warning: {warning}", style="yellow", highlight=False)
            out.print(job.id, highlight=False)
            if wait:
                raise typer.Exit(watch_job(client, job.id, display=err, output=out, interval=interval))
    except ClientError as error:
        _fail(str(error))


@app.command()
def watch(
    job: Annotated[int, typer.Argument(help="The job's id.")],
    api_key: ApiKey,
    interval: Interval = 1.0,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """Follow a job until it finishes, then print its answer or its notice (exit code 0 only if it succeeded)."""
    out, err = _consoles()
    try:
        with PlimsollClient(api_url, api_key) as client:
            code = watch_job(client, job, display=err, output=out, interval=interval)
    except ClientError as error:
        _fail(str(error))
    except KeyboardInterrupt:
        err.print(f"Stopped watching; job {job} goes on.")
        raise typer.Exit(130) from None
    raise typer.Exit(code)


@app.command()
def notices(
    api_key: ApiKey,
    all_: Annotated[bool, typer.Option("--all", help="Also the notices already read.")] = False,
    mark_read: Annotated[bool, typer.Option("--mark-read", help="Mark the notices shown as read.")] = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """Show the tenant's unread notices (with --all, every notice), newest first."""
    out, err = _consoles()
    try:
        with PlimsollClient(api_url, api_key) as client:
            shown = list(client.all_notices(unread=not all_))
            if not shown:
                err.print("No notices." if all_ else "No unread notices.")
            for notice in shown:
                state = "unread" if notice.read_at is None else "read"
                when = f"{notice.created_at:%Y-%m-%d %H:%M} UTC"
                out.print(f"Notice {notice.id} · job {notice.job_id} · {when} · {state}", style="bold", highlight=False)
                out.print(notice.text, markup=False, highlight=False, soft_wrap=True)
                out.print()
                if mark_read and notice.read_at is None:
                    client.mark_notice_read(notice.id)
    except ClientError as error:
        _fail(str(error))


@app.command("api")
def serve(
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="The port to listen on.")] = 8000,
) -> None:
    """Serve the HTTP API (uvicorn, api.app:app) on the settings' database."""
    uvicorn.run("api.app:app", host=host, port=port, proxy_headers=True)


@tenant_app.command("create")
def create_tenant_command(
    name: Annotated[str, typer.Argument(help="The tenant's name, unique.")],
    database_url: Annotated[
        str | None, typer.Option(help="The database (default: PLIMSOLL_DATABASE_URL from the settings).")
    ] = None,
) -> None:
    """Create a tenant and print its API key. The key is shown this once: only its hash is stored."""
    out, err = _consoles()
    database = Database(database_url) if database_url else get_database()
    try:
        with database.session() as session:
            tenant, key = create_tenant(session, name=name)
    except InvalidInput as error:
        _fail(str(error))
    except SQLAlchemyError as error:
        reason = f"{error.__class__.__name__}: {error.args[0] if error.args else error}"
        _fail(f"the database refused: {reason}. Check PLIMSOLL_DATABASE_URL, and that the migrations have run.")
    finally:
        if database_url:
            database.dispose()
    err.print(f"Tenant {tenant.name!r} created (id {tenant.id}). Its API key, shown only this once:", highlight=False)
    out.print(key, highlight=False, markup=False)
