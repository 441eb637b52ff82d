"""Tenants and their API keys, for the operator: on the database directly (PLIMSOLL_DATABASE_URL), no API."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict
from decimal import Decimal
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import Json, consoles, fail, plain, print_json, require_database_setting, table

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from models.db import Database

app = typer.Typer(help="Tenants and their API keys (works on the database directly).", no_args_is_help=True)

DatabaseUrl = Annotated[
    str | None, typer.Option(help="The database (default: PLIMSOLL_DATABASE_URL from the settings).")
]
Name = Annotated[str, typer.Argument(help="The tenant's name.")]


@contextmanager
def session_on(database_url: str | None) -> Iterator[Session]:
    """A session committed at the end; the data functions' refusals and database errors end the command."""
    with database_on(database_url) as database, database.session() as session:
        yield session


@contextmanager
def database_on(database_url: str | None, command: str = "plimsoll tenant") -> Iterator[Database]:
    """The database of ``database_url`` (else the settings'); the data functions' refusals and database errors
    end the command."""
    from sqlalchemy.exc import SQLAlchemyError

    from models.db import Database, get_database
    from models.errors import InvalidInput, NotFound

    if not database_url:
        require_database_setting(command)
    database = Database(database_url) if database_url else get_database()
    try:
        yield database
    except (InvalidInput, NotFound) as error:
        fail(str(error))
    except SQLAlchemyError as error:
        reason = f"{error.__class__.__name__}: {error.args[0] if error.args else error}"
        fail(f"the database refused: {reason}. Check PLIMSOLL_DATABASE_URL, and that the migrations have run.")
    finally:
        if database_url:
            database.dispose()


@app.command("create")
def create(name: Name, as_json: Json = False, database_url: DatabaseUrl = None) -> None:
    """Create a tenant and print its API key. The key is shown this once: only its hash is stored."""
    from models.tenants import create_tenant

    out, err = consoles()
    with session_on(database_url) as session:
        tenant, key = create_tenant(session, name=name)
        tenant_id, tenant_name = tenant.id, tenant.name
    if as_json:
        print_json({"id": tenant_id, "name": tenant_name, "api_key": key})
        return
    plain(err, f"Tenant {tenant_name!r} created (id {tenant_id}). Its API key, shown only this once:")
    plain(out, key)


@app.command("list")
def list_tenants(as_json: Json = False, database_url: DatabaseUrl = None) -> None:
    """Every tenant, with how many of its API keys work and how many are revoked."""
    from models.tenants import LIMITS, tenants

    out, err = consoles()
    with session_on(database_url) as session:
        rows = tenants(session)
    if as_json:
        print_json([asdict(row) for row in rows])
        return
    if not rows:
        plain(err, "No tenants.")
        return
    listing = table(
        "id", "name", "created (UTC)", "keys", "revoked", "running jobs cap", "steps", "input tokens", "queued",
        "bytes", "retention days",
    )  # fmt: skip
    for row in rows:
        listing.add_row(
            str(row.id),
            row.name,
            f"{row.created_at:%Y-%m-%d %H:%M}",
            str(row.active_keys),
            str(row.revoked_keys),
            *(_own(getattr(row, name), name) for name in ("max_running_jobs", *LIMITS)),
        )
    out.print(listing)
    plain(err, "A limit shown as default is the setting's (plimsoll tenant limits sets the tenant's own).")


def _number(value: int | Decimal) -> int | float:
    return float(value) if isinstance(value, Decimal) else value


def _own(value: int | None, name: str) -> str:
    none = "for ever" if name == "retention_days" else "none"
    return "default" if value is None else none if value == 0 else f"{value:,}"


@app.command("revoke")
def revoke(name: Name, as_json: Json = False, database_url: DatabaseUrl = None) -> None:
    """Revoke every API key of the tenant: its requests are refused (401) until a key is issued with rotate-key."""
    from models.tenants import revoke_keys, tenant_named

    _out, err = consoles()
    with session_on(database_url) as session:
        tenant = tenant_named(session, name)
        count = revoke_keys(session, tenant_id=tenant.id)
    if as_json:
        print_json({"name": name, "revoked": count})
        return
    plain(err, f"{count} key{'' if count == 1 else 's'} of tenant {name!r} revoked.")


@app.command("rotate-key")
def rotate(
    name: Name,
    keep_old: Annotated[
        bool, typer.Option("--keep-old", help="Keep the old keys working (revoke them later, with revoke).")
    ] = False,
    as_json: Json = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Issue a new API key for the tenant and print it (shown this once); the old keys stop working."""
    from models.tenants import rotate_key, tenant_named

    out, err = consoles()
    with session_on(database_url) as session:
        tenant = tenant_named(session, name)
        key = rotate_key(session, tenant_id=tenant.id, keep_old=keep_old)
    if as_json:
        print_json({"name": name, "api_key": key, "old_keys_revoked": not keep_old})
        return
    old = "The old keys still work." if keep_old else "The old keys no longer work."
    plain(err, f"A new key for tenant {name!r}, shown only this once. {old}")
    plain(out, key)


@app.command("cap")
def cap(
    name: Name,
    jobs: Annotated[
        int | None, typer.Argument(min=0, help="The most jobs it may run at once (0: no cap).", show_default=False)
    ] = None,
    default: Annotated[bool, typer.Option("--default", help="Back to PLIMSOLL_MAX_RUNNING_JOBS_PER_TENANT.")] = False,
    as_json: Json = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Set how many jobs the tenant may run at once; more wait queued and start as its running jobs end."""
    from models.tenants import set_running_cap, tenant_named

    _out, err = consoles()
    if (jobs is None) == (not default):
        fail("give either a number of jobs (0: no cap) or --default")
    with session_on(database_url) as session:
        tenant = tenant_named(session, name)
        set_running_cap(session, tenant_id=tenant.id, cap=jobs)
    if as_json:
        print_json({"name": name, "max_running_jobs": jobs})
        return
    told = {None: "the default (PLIMSOLL_MAX_RUNNING_JOBS_PER_TENANT)", 0: "no cap"}.get(jobs, str(jobs))
    plain(err, f"Running jobs of tenant {name!r}: {told}.")


@app.command("limits")
def limits(
    name: Name,
    max_steps: Annotated[
        int | None, typer.Option(min=1, help="The most steps a job may have (and its default).", show_default=False)
    ] = None,
    max_input_tokens: Annotated[
        int | None,
        typer.Option(
            min=1_000, help="The most input tokens a job may use over its steps (and its default).", show_default=False
        ),
    ] = None,
    max_queued_jobs: Annotated[
        int | None, typer.Option(min=0, help="The most main jobs it may have queued (0: no limit).", show_default=False)
    ] = None,
    max_document_bytes: Annotated[
        int | None,
        typer.Option(min=0, help="The most bytes its stored documents may take (0: no limit).", show_default=False),
    ] = None,
    max_cost_usd: Annotated[
        float | None,
        typer.Option(help="The most USD a job and its subagents may spend (and its default).", show_default=False),
    ] = None,
    daily_usd: Annotated[
        float | None,
        typer.Option(help="The most USD it may spend per UTC day (0: no budget).", show_default=False),
    ] = None,
    monthly_usd: Annotated[
        float | None,
        typer.Option(help="The most USD it may spend per UTC month (0: no budget).", show_default=False),
    ] = None,
    retention_days: Annotated[
        int | None,
        typer.Option(
            min=0,
            help="Days after a job ends before its history is purged (0: kept for ever; plimsoll retention).",
            show_default=False,
        ),
    ] = None,
    reset: Annotated[
        bool, typer.Option("--reset", help="Every limit back to its setting's, before those given.")
    ] = False,
    as_json: Json = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Set the tenant's own limits, which win over the settings (PLIMSOLL_MAX_STEPS_PER_JOB,
    PLIMSOLL_MAX_INPUT_TOKENS_PER_JOB, PLIMSOLL_MAX_QUEUED_JOBS_PER_TENANT, PLIMSOLL_MAX_DOCUMENT_BYTES_PER_TENANT,
    PLIMSOLL_MAX_COST_USD_PER_JOB, PLIMSOLL_DAILY_USD_PER_TENANT, PLIMSOLL_MONTHLY_USD_PER_TENANT,
    PLIMSOLL_RETENTION_DAYS); with none given, print them. A job asking for more steps, input tokens or money is
    refused; a raised day's or month's budget lets the tenant's waiting jobs go on."""
    from models.limits import limits_of
    from models.settings import get_settings
    from models.tenants import LIMITS, MONEY_LIMITS, set_limits, tenant_named

    money = {"max_cost_usd_per_job": max_cost_usd, "daily_usd": daily_usd, "monthly_usd": monthly_usd}
    given: dict[str, int | Decimal | None] = {
        "max_steps_per_job": max_steps,
        "max_input_tokens_per_job": max_input_tokens,
        "max_queued_jobs": max_queued_jobs,
        "max_document_bytes": max_document_bytes,
        **{name: None if usd is None else Decimal(str(usd)) for name, usd in money.items()},
        "retention_days": retention_days,
    }
    changes: dict[str, int | Decimal | None] = dict.fromkeys([*LIMITS, *MONEY_LIMITS]) if reset else {}
    changes |= {limit: value for limit, value in given.items() if value is not None}
    with session_on(database_url) as session:
        tenant = tenant_named(session, name)
        set_limits(session, tenant_id=tenant.id, limits=changes)
        session.flush()
        now_in_force = asdict(limits_of(tenant, get_settings()))
    if as_json:
        print_json(
            {"name": name} | {limit: {**each, "value": _number(each["value"])} for limit, each in now_in_force.items()}
        )
        return
    out, _err = consoles()
    grid = table("limit", "value", "set in")
    for limit, each in now_in_force.items():
        value = each["value"]
        none = "kept for ever" if limit == "retention_days" else "none"
        shown = none if value == 0 else f"{value:,} USD" if isinstance(value, Decimal) else f"{value:,}"
        grid.add_row(limit, shown, each["where"])
    out.print(grid)
