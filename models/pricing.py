"""What a model costs now, in USD per million tokens: input, output, cache writes (5-minute and 1-hour TTL) and
cache reads, with where the price came from and since when it holds.

The published prices are those of pydantic's genai-prices, read from the data its package bundles: nothing is
fetched (its background updater is never started), so a price changes only when the package is upgraded (make
upgrade). The operator may set any model's prices (PLIMSOLL_PRICES, ``PriceOverride``); the bundled emulator's
models take a real model's (PLIMSOLL_EMULATOR_PRICED_AS). A step can store the ``Prices`` it was charged at."""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from datetime import UTC, date, datetime
from decimal import Decimal
from functools import cache
from importlib.metadata import version

from genai_prices import data_snapshot, types

from models.catalogue import EMULATOR, ModelSpec, model_spec
from models.errors import NotFound
from models.prices import PriceOverride
from models.settings import Settings

SOURCE = "genai-prices"
OPERATOR = "PLIMSOLL_PRICES"
THEIR_NAMES = {  # our rates by genai-prices' names (its ModelPrice's attributes)
    "input": "input_mtok",
    "output": "output_mtok",
    "cache_write_5m": "cache_write_mtok",
    "cache_write_1h": "cache_write_1h_mtok",
    "cache_read": "cache_read_mtok",
}


@cache
def published_source() -> str:
    """genai-prices and its version (read once: the package's metadata takes a quarter of a millisecond a look)."""
    return f"{SOURCE} {version(SOURCE)}"


@dataclass(frozen=True)
class Rates:
    """USD per million tokens."""

    input: Decimal  # uncached input
    output: Decimal
    cache_write_5m: Decimal
    cache_write_1h: Decimal
    cache_read: Decimal


@dataclass(frozen=True)
class Prices:
    model: str  # the model asked about
    priced_as: str  # the model whose prices these are (the emulator's: a real one)
    rates: Rates  # a request of up to the first tier's input tokens (all of them, if no tiers)
    # (more than this many input tokens, the rates every token of the request pays then), in order: a provider's
    # long-context prices apply to the whole request once its input passes the threshold
    tiers: tuple[tuple[int, Rates], ...]
    source: str  # e.g. "genai-prices 0.2.3", "PLIMSOLL_PRICES", "PLIMSOLL_PRICES over genai-prices 0.2.3"
    since: date | None  # when these prices took effect, where the source says
    at: datetime  # the moment they are the prices of

    def rates_for(self, input_tokens: int) -> Rates:
        """The rates a request with this many input tokens (uncached, written and read) pays."""
        rates = self.rates
        for start, tier in self.tiers:
            if input_tokens > start:
                rates = tier
        return rates


class Unpriced(NotFound):
    """Neither the published prices nor the operator's give the model a price."""


def prices_of(model: str, settings: Settings, *, at: datetime | None = None) -> Prices:
    """The prices of ``model`` at ``at`` (now): the operator's (PLIMSOLL_PRICES) over the published ones, field by
    field; an emulator's model is priced as PLIMSOLL_EMULATOR_PRICED_AS unless the operator prices it itself."""
    at = at or datetime.now(UTC)
    spec = model_spec(model, settings.models)
    override = settings.prices.get(model)
    priced_as = _priced_as(spec, settings) if override is None else model
    published = _published(priced_as, at)
    if override is None and priced_as != model:
        override = settings.prices.get(priced_as)
    if override is None:
        if published is None:
            raise Unpriced(f"no price for {model}: {_unpriced_hint(priced_as)}")
        return replace(published, model=model, at=at)
    return _overridden(model, priced_as, override, published, at)


def _priced_as(spec: ModelSpec, settings: Settings) -> str:
    return settings.emulator_priced_as if spec.base_url == EMULATOR else spec.name


def _unpriced_hint(name: str) -> str:
    return (
        f"{published_source()} has none for {name}; set it in {OPERATOR}, e.g. "
        f'{{"{name}": {{"input": 3, "output": 15}}}} (USD per million tokens)'
    )


def _overridden(model: str, priced_as: str, override: PriceOverride, published: Prices | None, at: datetime) -> Prices:
    given = {name: value for name, value in override.model_dump(exclude={"since"}).items() if value is not None}
    if published is None:
        if "input" not in given or "output" not in given:
            raise Unpriced(
                f"no price for {model}: {OPERATOR} gives {', '.join(sorted(given)) or 'nothing'} of it, and "
                f"{published_source()} has none to fill in the rest: give at least input and output"
            )
        rates = Rates(**_filled(given))
        return Prices(model, priced_as, rates, (), OPERATOR, override.since, at)
    return Prices(
        model,
        priced_as,
        replace(published.rates, **given),
        tuple((start, replace(tier, **given)) for start, tier in published.tiers),
        f"{OPERATOR} over {published.source}" if len(given) < len(fields(Rates)) else OPERATOR,
        override.since or published.since,
        at,
    )


def _filled(given: dict[str, Decimal]) -> dict[str, Decimal]:
    """Rates from input and output alone: a provider that prices no cache bills its writes and reads as input."""
    write = given.get("cache_write_5m", given["input"])
    return {
        "cache_write_5m": write,
        "cache_write_1h": given.get("cache_write_1h", write),
        "cache_read": given.get("cache_read", given["input"]),
    } | given


def _published(name: str, at: datetime) -> Prices | None:
    """genai-prices' prices of ``name`` at ``at``, from the data bundled with the package; None if it has none."""
    try:
        _provider, found = data_snapshot.get_snapshot().find_provider_model(name, None, None, None)
    except LookupError:
        return None
    price = found.get_prices(at)
    if price.__dict__.get("input_mtok") is None or price.__dict__.get("output_mtok") is None:
        return None
    raw = {ours: price.__dict__.get(theirs) for ours, theirs in THEIR_NAMES.items()}
    starts = sorted({t.start for p in raw.values() if isinstance(p, types.TieredPrices) for t in p.tiers})

    def at_size(tokens: int) -> Rates:
        def one(value: Decimal | types.TieredPrices | None) -> Decimal | None:
            if not isinstance(value, types.TieredPrices):
                return value
            return next((t.price for t in reversed(value.tiers) if tokens > t.start), value.base)

        return Rates(**_filled({name: v for name, each in raw.items() if (v := one(each)) is not None}))

    since = _since(found.prices, at) if isinstance(found.prices, list) else None
    return Prices(name, name, at_size(0), tuple((s, at_size(s + 1)) for s in starts), published_source(), since, at)


def _since(conditional: list[types.ConditionalPrice], at: datetime) -> date | None:
    """The start date of the price in force at ``at`` among genai-prices' dated prices (the last one started)."""
    for each in reversed(conditional):
        if each.constraint is None:
            return None
        if each.constraint.active(at):
            return each.constraint.start_date if isinstance(each.constraint, types.StartDateConstraint) else None
    return None
