"""The tenant's notices: what the person needs to know about a job."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import DEFAULT_API_URL, ApiKey, ApiUrl, Json, api, consoles, plain, print_json

app = typer.Typer()


@app.command()
def notices(
    api_key: ApiKey = "",
    all_: Annotated[bool, typer.Option("--all", help="Also the notices already read.")] = False,
    mark_read: Annotated[bool, typer.Option("--mark-read", help="Mark the notices shown as read.")] = False,
    as_json: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """Show the tenant's unread notices (with --all, every notice), newest first."""
    out, err = consoles()
    with api(api_url, api_key) as client:
        shown = list(client.all_notices(unread=not all_))
        if mark_read:  # shown as they are now: read
            shown = [client.mark_notice_read(n.id) if n.read_at is None else n for n in shown]
    if as_json:
        print_json(shown)
        return
    if not shown:
        plain(err, "No notices." if all_ else "No unread notices.")
    for notice in shown:
        state = "unread" if notice.read_at is None else "read"
        when = f"{notice.created_at:%Y-%m-%d %H:%M} UTC"
        out.print(f"Notice {notice.id} · job {notice.job_id} · {when} · {state}", style="bold", highlight=False)
        plain(out, notice.text)
        out.print()
