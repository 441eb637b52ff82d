"""What the tenant has spent, from the ledger: plimsoll usage."""

from __future__ import annotations

from datetime import date
from enum import StrEnum
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import DEFAULT_API_URL, ApiKey, ApiUrl, Json, api, consoles, print_json, table, usd

if TYPE_CHECKING:
    from api.schemas import CostSplit

app = typer.Typer()


class By(StrEnum):
    DAY = "day"
    MONTH = "month"
    MODEL = "model"
    JOB = "job"


@app.command()
def usage(
    first: Annotated[
        str | None, typer.Option("--from", help="The first day (UTC, 2026-12-01); default: the month's.")
    ] = None,
    last: Annotated[str | None, typer.Option("--to", help="The last day (UTC), counted; default: today.")] = None,
    by: Annotated[By, typer.Option(help="One line per day, month, model or main job.")] = By.DAY,
    api_key: ApiKey = "",
    as_json: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """What the tenant's requests were billed in USD (the ledger): uncached input, cache writes, cache reads,
    output, and the part wasted (paid replies not used: a step run twice, a reply lost in an outage)."""
    for given in (first, last):
        if given is not None:
            try:
                date.fromisoformat(given)
            except ValueError:
                raise typer.BadParameter(f"{given!r} is not a date like 2026-12-01") from None
    with api(api_url, api_key) as client:
        report = client.usage(first=first, last=last)
    if as_json:
        print_json(report)
        return
    out = consoles()[0]
    lines: dict[By, list[tuple[str, CostSplit]]] = {
        By.DAY: [(p.period, p) for p in report.days],
        By.MONTH: [(p.period, p) for p in report.months],
        By.MODEL: [(m.model, m) for m in report.models],
        By.JOB: [(f"job {j.job_id}", j) for j in report.jobs],
    }
    grid = table(by.value, "total", "uncached input", "cache writes", "cache reads", "output", "wasted", "requests")
    for name, spent in [*lines[by], ("total", report)]:
        grid.add_row(
            name, usd(spent.total_usd), usd(spent.uncached_input_usd), usd(spent.cache_write_usd),
            usd(spent.cache_read_usd), usd(spent.output_usd), usd(spent.by_kind.get("wasted", 0.0)),
            f"{spent.requests:,}",
        )  # fmt: skip
    out.print(f"From {report.first_day} to {report.last_day} (UTC):")
    out.print(grid)
