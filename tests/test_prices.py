"""Every model's prices now (models/pricing.py): genai-prices' published ones, read from the data its package
bundles with nothing fetched, under the operator's overrides; the emulator's models priced as a real one."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest
from genai_prices import Usage, calc_price
from pydantic import ValidationError

from models.catalogue import CATALOGUE, EMULATOR
from models.pricing import Unpriced, prices_of
from models.settings import Settings, get_settings
from testbed.stack import environment

ROOT = Path(__file__).resolve().parent.parent
PER_MILLION = 1_000_000

# Prices every catalogue model with an audit hook that refuses any socket: genai-prices must answer from its
# bundled data alone (its updater, which would fetch, is never started).
OFFLINE = """
import json, sys

attempts = []

def no_network(event, args):
    if event.startswith("socket.") and event != "socket.__new__" or event == "urllib.Request":
        attempts.append(event)
        raise OSError(f"no network in this test: {event}")

sys.addaudithook(no_network)
from models.catalogue import CATALOGUE
from models.pricing import prices_of
from models.settings import Settings

settings = Settings(_env_file=None)
prices = {name: [str(prices_of(name, settings).rates.input), prices_of(name, settings).source] for name in CATALOGUE}
during = list(attempts)
import socket
try:
    socket.getaddrinfo("localhost", 80)  # the hook is live: this is refused and recorded
except OSError:
    pass
print(json.dumps({"attempts": during, "probe": attempts[len(during):], "prices": prices}))
"""


@pytest.fixture
def defaults() -> Iterator[Settings]:
    """The settings with no price or model set by the environment (the service's defaults)."""
    with environment({"PLIMSOLL_PRICES": None, "PLIMSOLL_EMULATOR_PRICED_AS": None, "PLIMSOLL_MODELS": None}):
        yield get_settings()


def test_every_catalogue_model_is_priced_offline_from_the_bundled_data() -> None:
    ran = subprocess.run(
        [sys.executable, "-c", OFFLINE], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    )
    found = json.loads(ran.stdout)
    assert found["attempts"] == [] and found["probe"] == ["socket.getaddrinfo"]
    assert set(found["prices"]) == set(CATALOGUE)
    assert all(Decimal(price) > 0 and source.startswith("genai-prices ") for price, source in found["prices"].values())


@pytest.mark.parametrize("name", sorted(name for name, spec in CATALOGUE.items() if spec.base_url != EMULATOR))
def test_each_real_model_costs_what_genai_prices_charges_for_it(name: str, defaults: Settings) -> None:
    prices = prices_of(name, defaults)
    tokens = 100_000  # within every model's first price tier
    plain = calc_price(Usage(input_tokens=tokens, output_tokens=tokens), name)
    read = calc_price(Usage(input_tokens=tokens, cache_read_tokens=tokens), name)
    assert (prices.model, prices.priced_as) == (name, name)
    assert prices.rates.input * tokens / PER_MILLION == plain.input_price
    assert prices.rates.output * tokens / PER_MILLION == plain.output_price
    assert prices.rates.cache_read * tokens / PER_MILLION == read.input_price
    for start, tier in prices.tiers:  # a longer request pays the tier's rate for every token
        long = calc_price(Usage(input_tokens=start + 1, output_tokens=start + 1), name)
        assert prices.rates_for(start + 1) == tier
        assert tier.input * (start + 1) / PER_MILLION == long.input_price


def test_the_dated_price_in_force_is_the_one_answered_with_its_start() -> None:
    settings = Settings(_env_file=None)
    # claude-sonnet-4-6 lost its long-context surcharge on 2026-03-13 (genai-prices' dated prices).
    before = prices_of("claude-sonnet-4-6", settings, at=datetime(2026, 3, 1, tzinfo=UTC))
    after = prices_of("claude-sonnet-4-6", settings, at=datetime(2026, 3, 14, tzinfo=UTC))
    assert before.tiers and before.since is None
    assert not after.tiers and after.since == date(2026, 3, 13)
    assert after.at == datetime(2026, 3, 14, tzinfo=UTC)


def test_the_emulators_models_are_priced_as_the_named_real_model(defaults: Settings) -> None:
    assert defaults.emulator_priced_as == "claude-sonnet-5-5"
    for name in ("plimsoll-emulator", "plimsoll-emulator-openai"):
        emulated = prices_of(name, defaults)
        assert (emulated.model, emulated.priced_as) == (name, "claude-sonnet-5-5")
        assert emulated.rates == prices_of("claude-sonnet-5-5", defaults).rates
    with environment({"PLIMSOLL_EMULATOR_PRICED_AS": "claude-opus-4-8"}):
        assert prices_of("plimsoll-emulator", get_settings()).rates == prices_of("claude-opus-4-8", defaults).rates
    with (
        environment({"PLIMSOLL_EMULATOR_PRICED_AS": "no-such-model"}),
        pytest.raises(Unpriced, match="PLIMSOLL_PRICES"),
    ):
        prices_of("plimsoll-emulator", get_settings())


def test_the_operator_sets_prices_field_by_field_over_the_published_ones(defaults: Settings) -> None:
    published = prices_of("gpt-4.1", defaults)
    overrides = {
        "gpt-4.1": {"output": 9, "since": "2026-12-01"},
        "plimsoll-emulator": {"input": 1, "output": 4},  # its own price: no longer the named model's
        "open-model": {"input": "0.5", "output": 1.5, "cache_read": 0.05},
    }
    models = {"open-model": {"provider": "openai", "context_limit": 32_000, "default_budget": 20_000,
                             "profile": "o200k", "max_output_tokens": 4_000}}  # fmt: skip
    with environment({"PLIMSOLL_PRICES": json.dumps(overrides), "PLIMSOLL_MODELS": json.dumps(models)}):
        settings = get_settings()
        gpt, emulator, open_model = (prices_of(name, settings) for name in overrides)
    assert gpt.rates.output == 9 and gpt.rates.input == published.rates.input
    assert (gpt.source, gpt.since) == (f"PLIMSOLL_PRICES over {published.source}", date(2026, 12, 1))
    assert (emulator.priced_as, emulator.source, emulator.rates.input, emulator.rates.output) == (
        "plimsoll-emulator", "PLIMSOLL_PRICES", Decimal(1), Decimal(4),
    )  # fmt: skip
    assert emulator.rates.cache_read == emulator.rates.cache_write_5m == 1  # no cache prices: as input
    assert (open_model.rates.input, open_model.rates.cache_read, open_model.source) == (
        Decimal("0.5"), Decimal("0.05"), "PLIMSOLL_PRICES",
    )  # fmt: skip


def test_a_model_nobody_prices_says_how_to_price_it(defaults: Settings) -> None:
    models = {"open-model": {"provider": "openai", "context_limit": 32_000, "default_budget": 20_000,
                             "profile": "o200k", "max_output_tokens": 4_000}}  # fmt: skip
    half = {"PLIMSOLL_MODELS": json.dumps(models), "PLIMSOLL_PRICES": '{"open-model": {"input": 1}}'}
    with environment(half), pytest.raises(Unpriced, match="give at least input and output"):
        prices_of("open-model", get_settings())
    hint = re.escape('set it in PLIMSOLL_PRICES, e.g. {"open-model": {"input": 3, "output": 15}}')
    with environment({"PLIMSOLL_MODELS": json.dumps(models)}), pytest.raises(Unpriced, match=hint):
        prices_of("open-model", get_settings())


@pytest.mark.parametrize(
    "prices", ['{"gpt-4.1": {"input": -1}}', '{"gpt-4.1": {"inptu": 1}}', '{"gpt-4.1": {"since": "soon"}}']
)
def test_prices_the_settings_cannot_hold_are_refused_when_read(prices: str) -> None:
    with environment({"PLIMSOLL_PRICES": prices}), pytest.raises(ValidationError, match=r"prices\.`gpt-4\.1`"):
        Settings(_env_file=None)
