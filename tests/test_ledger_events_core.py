"""The ledger's and the events' foundations: a request's cost at given prices (models/costs.py), a charge that
keeps the prices it was charged at (models/ledger.py), and an event that PostgreSQL announces only at the commit
that makes it true (models/events.py)."""

from __future__ import annotations

import select
from decimal import Decimal

import psycopg

from models.costs import cost_of, worst_case
from models.db import Database
from models.events import CHANNEL, EventType, record
from models.jobs import create_job
from models.ledger import ChargeKind, record_charge, spent_by_main_job
from models.prices import PriceOverride
from models.pricing import prices_of
from models.settings import Settings
from models.tables import Event
from models.tenants import create_tenant

OPERATOR_PRICES = {"input": 3, "output": 15, "cache_write_5m": 3.75, "cache_write_1h": 6, "cache_read": 0.3}


def settings() -> Settings:
    return Settings(prices={"plimsoll-emulator": PriceOverride(**OPERATOR_PRICES)})


def test_a_request_costs_its_four_parts_at_their_rates() -> None:
    prices = prices_of("plimsoll-emulator", settings())
    cost = cost_of(prices, uncached=1_000_000, written=200_000, read=2_000_000, output=10_000)
    assert (cost.uncached, cost.cache_write, cost.cache_read, cost.output) == (
        Decimal(3),
        Decimal("0.75"),
        Decimal("0.6"),
        Decimal("0.15"),
    )
    assert cost.total == Decimal("4.5")
    an_hour = cost_of(prices, uncached=0, written=1_000_000, read=0, output=0, cache_ttl_seconds=3_600)
    assert an_hour.cache_write == Decimal(6)


def test_the_worst_case_is_every_input_token_written_and_every_output_token_spent() -> None:
    prices = prices_of("plimsoll-emulator", settings())
    assert worst_case(prices, input_tokens=100_000, max_output_tokens=4_000) == Decimal("0.375") + Decimal("0.06")
    for uncached, written, read in [(100_000, 0, 0), (0, 100_000, 0), (10_000, 40_000, 50_000)]:
        paid = cost_of(prices, uncached=uncached, written=written, read=read, output=4_000).total
        assert paid <= worst_case(prices, input_tokens=uncached + written + read, max_output_tokens=4_000)


def test_a_charge_keeps_its_prices_and_counts_toward_its_main_job(database: Database) -> None:
    with database.session() as session:
        tenant, _key = create_tenant(session, name="ledger-core")
        job = create_job(session, tenant_id=tenant.id, instruction="Read.")
        session.flush()
        prices = prices_of(job.model, Settings())
        charge = record_charge(
            session,
            job,
            step=1,
            kind=ChargeKind.STEP,
            prices=prices,
            uncached=1_000,
            written=0,
            read=0,
            output=100,
            cache_ttl_seconds=300,
        )
        session.flush()
        assert charge.prices["priced_as"] == prices.priced_as
        assert Decimal(charge.prices["usd_per_mtok"]["input"]) == prices.rates.input
        assert spent_by_main_job(session, job.id) == charge.total_usd > 0


def test_an_event_is_announced_at_its_commit_and_not_before(database: Database, database_url: str) -> None:
    listen_url = database_url.replace("postgresql+psycopg://", "postgresql://")
    with psycopg.connect(listen_url, autocommit=True) as listener:
        listener.execute(f"LISTEN {CHANNEL}")
        with database.session() as session:
            tenant, _key = create_tenant(session, name="events-core")
            job = create_job(session, tenant_id=tenant.id, instruction="Read.")
            session.flush()
            event = record(session, job, EventType.STATUS, {"status": "running"})
            assert not select.select([listener.fileno()], [], [], 0.2)[0]  # nothing is told before the commit
        notices = list(listener.notifies(timeout=5, stop_after=2))  # the job's own (queued), then this one
    assert [n.payload for n in notices] == [f"{tenant.id}:{job.id}:{event.id - 1}", f"{tenant.id}:{job.id}:{event.id}"]
    with database.session() as session:
        stored = session.get(Event, event.id)
        assert stored is not None and stored.type == "status" and stored.data == {"status": "running"}
