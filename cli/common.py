"""What the commands share: the API options, the two consoles, JSON output, and failing with a clear message.

The command modules import only typer and this module when the command line starts; what a command needs (the
API's client, pydantic, rich's widgets, the database) is imported when it runs, so `plimsoll --help` starts in a
blink (tests/test_cli_startup.py)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer

from api.constants import DEFAULT_API_URL, MAX_ID, MAX_LIMIT, PAGE_SIZE
from models.statuses import REPRODUCTIONS, Compaction, Strategy

if TYPE_CHECKING:
    from pydantic import ValidationError
    from rich.console import Console
    from rich.table import Table

    from api.client import PlimsollClient

__all__ = ["DEFAULT_API_URL", "MAX_ID", "PAGE_SIZE"]  # for the command modules

ApiUrl = Annotated[str, typer.Option("--api-url", envvar="PLIMSOLL_API_URL", help="The Plimsoll API.")]
ApiKey = Annotated[  # not marked required in --help: the environment usually gives it; api() says if nothing did
    str, typer.Option("--api-key", envvar="PLIMSOLL_API_KEY", help="The tenant's API key.", show_default=False)
]
Json = Annotated[bool, typer.Option("--json", help="Print one JSON document on standard output, for scripts.")]
Interval = Annotated[float, typer.Option("--interval", min=0.01, help="Seconds between two looks at the job.")]
Offset = Annotated[int, typer.Option(min=0, max=MAX_ID, help="Skip this many items.")]
Limit = Annotated[int, typer.Option(min=1, max=MAX_LIMIT, help="Show at most this many items.")]
JobId = Annotated[int, typer.Argument(min=1, max=MAX_ID, help="The job's id.")]


PIPE_WIDTH = 10_000  # standard output into a pipe or a file: one line per table row, never wrapped


def consoles() -> tuple[Console, Console]:
    """(standard output, standard error), looked up at each call so that redirection in tests is seen."""
    from rich.console import Console

    out = Console()
    return out if out.is_terminal else Console(width=PIPE_WIDTH), Console(stderr=True)


def model_shown(model: str, emulator: bool) -> str:
    """The model as the person reads it, saying where the bundled emulator answered under a real model's name."""
    return f"{model} on the emulator" if emulator and "emulator" not in model else model


def table(*columns: str) -> Table:
    """A plain table; in a terminal, only its last column wraps."""
    from rich.table import Table

    grid = Table(box=None, highlight=False)
    for column in columns[:-1]:
        grid.add_column(column, no_wrap=True)
    grid.add_column(columns[-1])
    return grid


def fail(message: str) -> NoReturn:
    from rich.console import Console

    Console(stderr=True).print(f"[red]Error:[/red] {message}", highlight=False, soft_wrap=True, markup=True)
    raise typer.Exit(1)


@contextmanager
def api(url: str, key: str) -> Iterator[PlimsollClient]:
    """A client of the API; a refusal or no answer ends the command with exit code 1 and the reason."""
    from api.client import ClientError, PlimsollClient

    if not key:
        fail("no API key: set PLIMSOLL_API_KEY, or pass --api-key (plimsoll tenant create NAME makes one)")
    try:
        with PlimsollClient(url, key) as client:
            yield client
    except ClientError as error:
        fail(str(error))


def usage_error(error: ValidationError) -> NoReturn:
    """Options the API would refuse: said as the options they came from, exit code 2, nothing sent."""
    from api.schemas import problem_text

    problems = "; ".join(
        f"--{'-'.join(map(str, e['loc'])).replace('_', '-')}: {problem_text(e)}" for e in error.errors()
    )
    plain(consoles()[1], f"Error: {problems}")
    raise typer.Exit(2)


def job_options(flags: dict[str, Any]) -> dict[str, Any]:
    """The job options among a command's flags (``locals()``; a flag carries its option's name), those given:
    the option's model (models/options.py) checks them and says what the defaults are."""
    from models.options import JobOptions

    return {name: value for name, value in flags.items() if name in JobOptions.model_fields and value is not None}


MaxCostUsd = Annotated[
    float | None,
    typer.Option(help="What the job and its subagents may spend together, in USD (default: the operator's)."),
]

# The choices are the API's own (models/statuses.py): an unknown one is a usage error (exit code 2), nothing sent.
ChosenStrategy = Annotated[
    Strategy,
    typer.Option(
        help=f"How the job fits its requests: {Strategy.PLIMSOLL}, or {' / '.join(REPRODUCTIONS)} to reproduce "
        "the old failures."
    ),
]
ChosenCompaction = Annotated[
    Compaction | None,
    typer.Option(
        help=f"{Compaction.AUTO}: summarize what would be dropped; {Compaction.OFF}: drop it; "
        f"{Compaction.SUMMARIZE_ALL}: summarize all but the newest messages, the benchmarks' baseline "
        f"(default: {Compaction.AUTO})."
    ),
]
AllowRetiredModel = Annotated[
    bool, typer.Option("--allow-retired-model", help="Run on a retired model anyway (the provider may refuse it).")
]


def require_database_setting(what: str) -> None:
    """End the command (exit code 1) unless a database is configured: without PLIMSOLL_DATABASE_URL the default
    is a SQLite file under var/ wherever the command runs, which only the embedded service
    (PLIMSOLL_QUEUE=inprocess) should use; a worker or an operator's command there would work on a database
    nobody else sees."""
    from models.settings import get_settings

    settings = get_settings()
    if "database_url" not in settings.model_fields_set and settings.queue != "inprocess":
        fail(
            f"{what} needs a database: set PLIMSOLL_DATABASE_URL (the service's, e.g. "
            "postgresql+psycopg://plimsoll@127.0.0.1:5432/plimsoll). Without it only the embedded service "
            f"(PLIMSOLL_QUEUE=inprocess) runs, on {settings.database_url}."
        )


def print_json(value: Any) -> None:
    """Exactly one JSON document on standard output (models, lists and dicts of them, dates), whatever the
    terminal."""
    from pydantic_core import to_json

    typer.echo(to_json(value, indent=2).decode())


def plain(console: Console, text: str, **style: Any) -> None:
    """Text as it is: never read as rich markup, never highlighted."""
    console.print(text, markup=False, highlight=False, soft_wrap=True, **style)


def usd(amount: float) -> str:
    """Dollars to the hundredth of a cent: a step costs cents or less."""
    return f"${amount:,.4f}"
