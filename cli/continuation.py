"""continue: start a new chat from a job that ended, with the next step."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import (
    DEFAULT_API_URL,
    AllowRetiredModel,
    ApiKey,
    ApiUrl,
    ChosenStrategy,
    Interval,
    JobId,
    Json,
    MaxCostUsd,
    api,
    consoles,
    job_options,
    plain,
    usage_error,
)
from cli.jobs import follow
from models.statuses import Strategy

app = typer.Typer()


@app.command(name="continue")
def continue_job(
    job: JobId,
    instruction: Annotated[str, typer.Option("--instruction", "-i", help="The next step, for the new chat.")],
    api_key: ApiKey = "",
    model: Annotated[str | None, typer.Option(help="A model of the catalogue (default: the old job's).")] = None,
    budget: Annotated[int | None, typer.Option(help="Input tokens per request (default: the old job's).")] = None,
    strategy: ChosenStrategy = Strategy.PLIMSOLL,
    max_cost_usd: MaxCostUsd = None,
    max_steps: Annotated[int | None, typer.Option(help="Its limit of steps (default: the old job's).")] = None,
    max_input_tokens: Annotated[
        int | None, typer.Option(help="Its limit of input tokens over its steps (default: the old job's).")
    ] = None,
    allow_retired_model: AllowRetiredModel = False,
    wait: Annotated[bool, typer.Option("--wait", help="Watch the new job until it finishes.")] = False,
    interval: Interval = 1.0,
    as_json: Json = False,
    api_url: ApiUrl = DEFAULT_API_URL,
) -> None:
    """Start a new job that continues JOB in a new chat: the same documents, a hand-over of what JOB was asked,
    produced and left to do, and the next step. Prints the new job's id."""
    from pydantic import ValidationError

    from api.schemas import ContinueIn

    err = consoles()[1]
    try:
        next_step = ContinueIn(instruction=instruction, **job_options(locals()))
    except ValidationError as error:
        usage_error(error)
    with api(api_url, api_key) as client:
        created = client.continue_job(job, next_step)
        plain(err, f"Job {created.id} continues job {job} in a new chat: {created.model}, budget {created.budget:,}.")
        for warning in created.warnings:
            plain(err, f"Warning: {warning}", style="yellow")
        follow(client, created, wait=wait, as_json=as_json, interval=interval)
