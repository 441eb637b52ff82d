"""The tenant's documents: list them, delete one."""

from __future__ import annotations

import enum
from typing import Annotated

import typer

from cli.common import (
    DEFAULT_API_URL,
    MAX_ID,
    ApiKey,
    ApiUrl,
    Json,
    Limit,
    Offset,
    api,
    consoles,
    plain,
    print_json,
    table,
)

app = typer.Typer()


class Action(enum.StrEnum):
    LIST = "list"
    DELETE = "delete"


@app.command()
def documents(
    api_key: ApiKey = "",
    action: Annotated[Action, typer.Argument(help="list, or delete ID.")] = Action.LIST,
    document_id: Annotated[
        int | None, typer.Argument(min=1, max=MAX_ID, help="The document to delete.", show_default=False)
    ] = None,
    offset: Offset = 0,
    limit: Limit = 50,
    as_json: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """List the tenant's documents (newest first), or delete one.

    A document that a queued or running job uses cannot be deleted. Uploading the same file again gives the
    same document, not a copy."""
    out, err = consoles()
    if action is Action.DELETE:
        if document_id is None:
            raise typer.BadParameter("delete needs the document's id: plimsoll documents delete ID")
        with api(api_url, api_key) as client:
            client.delete_document(document_id)
        if as_json:
            print_json({"deleted": document_id})
        else:
            plain(err, f"Document {document_id} deleted.")
        return
    if document_id is not None:
        raise typer.BadParameter("list takes no id")
    with api(api_url, api_key) as client:
        page = client.documents(offset=offset, limit=limit)
    if as_json:
        print_json(page)
        return
    if not page.items:
        plain(err, "No documents." if page.total == 0 else f"No documents past {offset:,} of {page.total:,}.")
        return
    listing = table("id", "name", "characters", "tokens (est.)", "uploaded (UTC)")
    for document in page.items:
        listing.add_row(
            str(document.id), document.name, f"{document.chars:,}", f"{document.token_estimate:,}",
            f"{document.created_at:%Y-%m-%d %H:%M}",
        )  # fmt: skip
    out.print(listing)
    if offset + len(page.items) < page.total:
        plain(err, f"{len(page.items)} of {page.total:,}; the next page: --offset {offset + len(page.items)}")
