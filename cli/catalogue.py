"""The model catalogue as the service runs it: plimsoll models."""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from cli.common import DEFAULT_API_URL, ApiKey, ApiUrl, Json, api, consoles, print_json, table

if TYPE_CHECKING:
    from api.schemas import ModelView

app = typer.Typer()


@app.command()
def models(api_url: ApiUrl = DEFAULT_API_URL, api_key: ApiKey = "", as_json: Json = False) -> None:
    """Every model a job may name: its window, default budget, and prices in USD per million tokens (input,
    output, cache write with the 5-minute and the 1-hour TTL, cache read), with where each price came from."""
    with api(api_url, api_key) as client:
        listing = client.models()
    if as_json:
        print_json(listing)
        return
    grid = table("model", "window", "default budget", "input", "output", "write 5m", "write 1h", "read", "price from")
    for model in listing.models:
        name = f"{model.name} (default)" if model.name == listing.default_model else model.name
        grid.add_row(name, f"{model.context_limit:,}", f"{model.default_budget:,}", *_prices(model))
    consoles()[0].print(grid)


def _prices(model: ModelView) -> list[str]:
    if model.prices is None:
        return ["-"] * 5 + [model.unpriced or "no price"]
    rates, source = model.prices.rates, model.prices.source
    if model.prices.priced_as != model.name:
        source += f", as {model.prices.priced_as}"
    if model.prices.since:
        source += f", since {model.prices.since}"
    if model.prices.tiers:
        tier = model.prices.tiers[0]
        source += f"; over {tier.above_input_tokens:,} input tokens ${tier.rates.input:g} / ${tier.rates.output:g}"
    money = (rates.input, rates.output, rates.cache_write_5m, rates.cache_write_1h, rates.cache_read)
    return [*(f"${each:g}" for each in money), source]
