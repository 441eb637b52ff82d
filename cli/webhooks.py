"""``plimsoll webhooks``: the tenant's webhook endpoints, and the deliveries of its events to them."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import DEFAULT_API_URL, MAX_ID, ApiKey, ApiUrl, Json, Limit, api, consoles, plain, print_json, table

app = typer.Typer(help="Webhooks: endpoints that receive the tenant's events, signed per Standard Webhooks.")

EVENTS_HELP = (
    "Event types, comma-separated or repeated: job.ended, job.needs_new_chat, notice (also step, compaction, "
    "subagent.started, subagent.ended, status)."
)


@app.command("add")
def add(
    url: Annotated[str, typer.Argument(help="The receiver's http:// or https:// address.")],
    events: Annotated[list[str], typer.Option("--events", "-e", help=EVENTS_HELP)],
    api_key: ApiKey = "",
    as_json: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """Register an endpoint; prints its id, then its signing secret, which is shown this once."""
    chosen = [kind.strip() for given in events for kind in given.split(",") if kind.strip()]
    with api(api_url, api_key) as client:
        created = client.add_webhook(url, chosen)
    if as_json:
        print_json(created)
        return
    out, err = consoles()
    plain(out, str(created.id))
    plain(out, created.secret)
    plain(err, f"Webhook {created.id} for {', '.join(created.events)}: keep the secret, it is not shown again.")


@app.command("list")
def list_(api_key: ApiKey = "", as_json: Json = False, api_url: ApiUrl = DEFAULT_API_URL) -> None:
    """The tenant's endpoints."""
    with api(api_url, api_key) as client:
        endpoints = client.webhooks().items
    if as_json:
        print_json(endpoints)
        return
    out, err = consoles()
    if not endpoints:
        plain(err, "No webhooks.")
        return
    grid = table("ID", "STATE", "EVENTS", "URL")
    for endpoint in endpoints:
        state = f"down ({endpoint.failures} failed)" if endpoint.failures else "ok"
        grid.add_row(str(endpoint.id), state, ",".join(endpoint.events), endpoint.url)
    out.print(grid)


@app.command("remove")
def remove(
    webhook_id: Annotated[int, typer.Argument(min=1, max=MAX_ID, help="The endpoint's id.")],
    api_key: ApiKey = "",
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """Remove an endpoint: nothing more is sent to it (its deliveries stay listed)."""
    with api(api_url, api_key) as client:
        client.remove_webhook(webhook_id)
    plain(consoles()[1], f"Webhook {webhook_id} removed.")


@app.command("deliveries")
def deliveries(
    endpoint: Annotated[int | None, typer.Option(min=1, max=MAX_ID, help="Only this endpoint's.")] = None,
    job: Annotated[int | None, typer.Option(min=1, max=MAX_ID, help="Only this job's events.")] = None,
    limit: Limit = 20,
    api_key: ApiKey = "",
    as_json: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """The newest deliveries, each with every attempt and the receiver's answer."""
    with api(api_url, api_key) as client:
        shown = client.deliveries(endpoint_id=endpoint, job_id=job, limit=limit).items
    if as_json:
        print_json(shown)
        return
    out, err = consoles()
    if not shown:
        plain(err, "No deliveries.")
        return
    grid = table("DELIVERY", "ENDPOINT", "JOB", "TYPE", "WEBHOOK-ID", "STATUS", "ATTEMPTS")
    for delivery in shown:
        tries = "; ".join(
            f"{a.started_at:%H:%M:%S} {a.outcome}"
            + (f" {a.status_code}" if a.status_code else "")
            + (f" {a.error}" if a.error and not a.status_code else "")
            + (" (by hand)" if a.manual else "")
            for a in delivery.attempts
        )
        grid.add_row(
            str(delivery.id),
            str(delivery.endpoint_id),
            str(delivery.job_id),
            delivery.type,
            delivery.webhook_id,
            delivery.status,
            tries or "none yet",
        )
    out.print(grid)


@app.command("redeliver")
def redeliver(
    delivery_id: Annotated[int, typer.Argument(min=1, max=MAX_ID, help="The delivery's id.")],
    api_key: ApiKey = "",
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """Send a delivery again now, with the same webhook-id."""
    with api(api_url, api_key) as client:
        delivery = client.redeliver(delivery_id)
    plain(consoles()[1], f"Delivery {delivery.id} ({delivery.webhook_id}) queued to be sent again.")
