"""Retention, for the operator: each tenant's policy, what it keeps and what goes at the next sweep; a sweep now.
On the database directly (PLIMSOLL_DATABASE_URL), as ``plimsoll tenant`` is."""

from __future__ import annotations

import math
from dataclasses import asdict
from typing import Annotated

import typer

from cli.common import Json, consoles, plain, print_json, table
from cli.tenants import DatabaseUrl, database_on

app = typer.Typer()


@app.command()
def retention(
    sweep: Annotated[
        bool,
        typer.Option("--sweep", help="Purge every history due now and pack the ended ones, then show what is left."),
    ] = False,
    as_json: Json = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Each tenant's retention policy (plimsoll tenant limits --retention-days; PLIMSOLL_RETENTION_DAYS), the
    histories it keeps (main jobs, their messages and bytes, subagents' included; held ones) and what the next
    sweep purges. Celery beat sweeps every PLIMSOLL_RETENTION_SWEEP_EVERY_SECONDS."""
    from models import retention as policy
    from models.settings import get_settings

    out, err = consoles()
    settings = get_settings()
    with database_on(database_url, "plimsoll retention") as database:
        swept = policy.sweep(database, settings, seconds=math.inf) if sweep else None
        packed = policy.pack_ended(database, settings, seconds=math.inf) if sweep and settings.pack_histories else 0
        with database.session() as session:
            rows = policy.retention_report(session, settings)
    if as_json:
        swept_json = {"swept": asdict(swept), "packed": packed} if swept else {}
        print_json({"tenants": [asdict(row) for row in rows]} | swept_json)
        return
    if swept is not None:
        purged = f"{swept.purged.jobs:,} jobs' histories purged ({swept.purged.messages:,} messages)"
        plain(err, f"Swept: {purged}; {packed:,} messages of ended jobs packed.")
    grid = table("tenant", "keeps", "set in", "jobs kept", "held", "purged", "messages", "bytes", "next sweep")
    for row in rows:
        keeps = "for ever" if row.days == 0 else f"{row.days:,} days"
        goes = f"{row.due_jobs:,} jobs, {row.due_messages:,} messages, {row.due_bytes:,} bytes" if row.due_jobs else "-"
        grid.add_row(
            row.tenant, keeps, row.where, f"{row.jobs:,}", f"{row.held:,}", f"{row.purged:,}", f"{row.messages:,}",
            f"{row.bytes:,}", goes,
        )  # fmt: skip
    out.print(grid)
