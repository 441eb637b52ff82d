"""Budgets in money: what a main job with its subagents, and a tenant per UTC day and per UTC month, may spend.

Every worker on every machine reserves a request's worst case (``models.costs.worst_case``) before sending it,
in one Lua script over the keys of the budgets it spends (the main job's, the tenant's day's, its month's) in the
shared Redis: the script refuses the request if any of them cannot hold it beside what is spent and what other
requests hold, and otherwise holds it in all of them at once, so two workers cannot both take a budget's last
dollar. After the reply the hold becomes the real cost (``settle``); a request that was not sent gives its hold
back (``release``); a hold whose step died expires (the step's longest call plus its storing time) and is
forgotten by the next reservation, so nothing stays reserved for ever.

Redis is a cache of the ledger (``models.tables.Charge``, in PostgreSQL), not its master. A budget's key that is
missing (Redis restarted empty, the key expired) is rebuilt from the ledger's sum before the script runs again;
holds lost with it belong to requests in flight, whose charges the ledger records when they are stored.

Amounts are whole nano-USD in Redis: exact in Lua's numbers up to 9 million USD, and finer than any price.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import ROUND_CEILING, Decimal
from typing import Literal

import redis
from sqlalchemy import func, select
from sqlalchemy.orm import Session

from models.costs import worst_case
from models.limits import OverQuota, TenantLimits, tenant_limits
from models.pricing import Unpriced, prices_of
from models.settings import Settings
from models.tables import Charge, Job

logger = logging.getLogger(__name__)

KEYS = "plimsoll:budget:"
NANO = Decimal("0.000000001")
DAY_KEEP_SECONDS = 3 * 24 * 3600  # a day's key outlives its day (a step reserved at 23:59 settles after it)
MONTH_KEEP_SECONDS = 33 * 24 * 3600
JOB_KEEP_SECONDS = 7 * 24 * 3600  # from its last use: a job idle longer is rebuilt from the ledger if it wakes

Kind = Literal["job", "day", "month"]

# KEYS: per budget, its hash (spent, and h:<ticket> = amount held) and its holds (ticket -> expiry, Redis's clock).
# ARGV: ticket, amount, seconds a hold lives, then per budget its limit (-1: none) and its key's lifetime.
# Returns {'ok'}, {'missing', i} (budget i must be rebuilt from the ledger) or {'over', i, spent, held}.
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ticket, amount, hold = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local n = #KEYS / 2
for i = 1, n do
  if redis.call('HEXISTS', KEYS[2 * i - 1], 'spent') == 0 then return {'missing', tostring(i)} end
end
for i = 1, n do
  local hash, holds = KEYS[2 * i - 1], KEYS[2 * i]
  for _, gone in ipairs(redis.call('ZRANGEBYSCORE', holds, '-inf', now)) do
    redis.call('HDEL', hash, 'h:' .. gone)
  end
  redis.call('ZREMRANGEBYSCORE', holds, '-inf', now)
  local limit = tonumber(ARGV[2 + 2 * i])
  if limit >= 0 then
    local spent = tonumber(redis.call('HGET', hash, 'spent'))
    local held = 0
    for _, live in ipairs(redis.call('ZRANGE', holds, 0, -1)) do
      if live ~= ticket then held = held + tonumber(redis.call('HGET', hash, 'h:' .. live) or '0') end
    end
    if spent + held + amount > limit then
      return {'over', tostring(i), string.format('%.0f', spent), string.format('%.0f', held)}
    end
  end
end
for i = 1, n do
  redis.call('HSET', KEYS[2 * i - 1], 'h:' .. ticket, string.format('%.0f', amount))
  redis.call('ZADD', KEYS[2 * i], now + hold, ticket)
  redis.call('EXPIRE', KEYS[2 * i - 1], ARGV[3 + 2 * i])
  redis.call('EXPIRE', KEYS[2 * i], ARGV[3 + 2 * i])
end
return {'ok'}
"""

# KEYS: as above. ARGV: ticket, the real cost (0: not sent). A budget whose key is gone gets nothing: its rebuild
# from the ledger counts the charge.
_SETTLE = """
local n = #KEYS / 2
for i = 1, n do
  local hash, holds = KEYS[2 * i - 1], KEYS[2 * i]
  if redis.call('HEXISTS', hash, 'spent') == 1 and ARGV[2] ~= '0' then
    redis.call('HINCRBY', hash, 'spent', ARGV[2])
    redis.call('HINCRBY', hash, 'sent', 1)
  end
  redis.call('HDEL', hash, 'h:' .. ARGV[1])
  redis.call('ZREM', holds, ARGV[1])
end
return 'ok'
"""

# KEYS: a budget's hash and holds. ARGV: spent per the ledger (kept only if Redis has none), the key's lifetime.
# Returns spent, held, and how many requests were settled with a cost since the key was made.
_READ = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
if redis.call('HSETNX', KEYS[1], 'spent', ARGV[1]) == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end
local held = 0
for _, live in ipairs(redis.call('ZRANGEBYSCORE', KEYS[2], '(' .. now, '+inf')) do
  held = held + tonumber(redis.call('HGET', KEYS[1], 'h:' .. live) or '0')
end
return {redis.call('HGET', KEYS[1], 'spent'), string.format('%.0f', held), redis.call('HGET', KEYS[1], 'sent') or '0'}
"""


@dataclass(frozen=True)
class Scope:
    """One budget a request spends: a main job's, or its tenant's for a day or a month."""

    kind: Kind
    tenant_id: int
    limit: Decimal | None  # USD (None: no budget, only counted)
    where: str  # where the limit is set, to name in refusals
    main_job_id: int = 0
    start: datetime | None = None  # a period's, UTC
    end: datetime | None = None  # when it resets

    def key(self, namespace: str) -> str:
        # One hash tag per tenant: a Redis Cluster keeps a script's keys on one node.
        if self.kind == "job" or self.start is None:
            name = f"job:{self.main_job_id}"
        else:
            name = f"day:{self.start:%Y-%m-%d}" if self.kind == "day" else f"month:{self.start:%Y-%m}"
        return f"{KEYS}{{{namespace}:{self.tenant_id}}}:{name}"

    def keep_seconds(self) -> int:
        return {"job": JOB_KEEP_SECONDS, "day": DAY_KEEP_SECONDS, "month": MONTH_KEEP_SECONDS}[self.kind]


@dataclass(frozen=True)
class Over:
    """A request that does not fit a budget: which, what is spent and held there, and what the request asked."""

    scope: Scope
    spent: Decimal
    held: Decimal
    asked: Decimal

    @property
    def left(self) -> Decimal:
        return max(Decimal(0), (self.scope.limit or Decimal(0)) - self.spent - self.held)


@dataclass(frozen=True)
class Standing:
    spent: Decimal
    held: Decimal
    sent: int = 0  # requests settled with a cost since Redis last had the key (their average is spent / sent)


def day_of(at: datetime) -> tuple[datetime, datetime]:
    start = at.astimezone(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
    return start, start + timedelta(days=1)


def month_of(at: datetime) -> tuple[datetime, datetime]:
    start = at.astimezone(UTC).replace(day=1, hour=0, minute=0, second=0, microsecond=0)
    return start, (start + timedelta(days=32)).replace(day=1)


def tenant_scopes(tenant_id: int, limits: TenantLimits, at: datetime) -> list[Scope]:
    """The tenant's day and month budgets at ``at`` (each counted even without a limit: a limit set later
    finds what was spent)."""
    scopes = []
    for kind, money, period in (("day", limits.daily_usd, day_of), ("month", limits.monthly_usd, month_of)):
        start, end = period(at)
        limit = money.value if money.value > 0 else None
        scopes.append(Scope(kind, tenant_id, limit, money.where, start=start, end=end))  # type: ignore[arg-type]
    return scopes


def job_scope(tenant_id: int, main_job_id: int, max_cost_usd: Decimal) -> Scope:
    return Scope("job", tenant_id, max_cost_usd, "the job's max_cost_usd", main_job_id=main_job_id)


def spent_in_ledger(session: Session, scope: Scope) -> Decimal:
    """What the ledger says ``scope`` has spent: the truth Redis is rebuilt from."""
    query = select(func.sum(Charge.total_usd))
    if scope.kind == "job":
        query = query.where(Charge.main_job_id == scope.main_job_id)
    else:
        query = query.where(
            Charge.tenant_id == scope.tenant_id, Charge.created_at >= scope.start, Charge.created_at < scope.end
        )
    return Decimal(session.scalar(query) or 0)


def namespace_of(session: Session) -> str:
    """Budgets of different databases sharing one Redis (two deployments, the tests' databases) never mix: the
    keys carry a hash of the database's address (the engine's, so the API and the workers agree)."""
    address = session.get_bind().engine.url.render_as_string(hide_password=True)
    return hashlib.sha256(address.encode()).hexdigest()[:12]


def to_nano(usd: Decimal) -> int:
    return int((usd / NANO).to_integral_value(rounding=ROUND_CEILING))


def from_nano(value: int | str | bytes) -> Decimal:
    return Decimal(int(value)) * NANO


class Budgets:
    """The shared budgets. ``ledger(scope)``: what the ledger says the scope has spent (read when Redis lacks it)."""

    def __init__(self, client: redis.Redis, namespace: str, ledger: Callable[[Scope], Decimal]) -> None:
        self._client = client
        self._namespace = namespace
        self._ledger = ledger
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)
        self._read = client.register_script(_READ)

    def reserve(self, ticket: str, scopes: Sequence[Scope], amount: Decimal, *, hold_seconds: float) -> Over | None:
        """Hold ``amount`` USD in every scope, or none if one cannot hold it (that one is returned)."""
        limits = [str(-1 if s.limit is None else to_nano(s.limit)) for s in scopes]
        args: list[str | int | float] = [ticket, to_nano(amount), max(1.0, hold_seconds)]
        for limit, scope in zip(limits, scopes, strict=True):
            args += [limit, scope.keep_seconds()]
        for _ in range(len(scopes) + 1):  # each missing budget is rebuilt once
            answer = [_text(part) for part in self._reserve(keys=self._keys(scopes), args=args)]
            if answer[0] == "ok":
                return None
            scope = scopes[int(answer[1]) - 1]
            if answer[0] == "over":
                return Over(scope, from_nano(answer[2]), from_nano(answer[3]), amount)
            self.standing(scope)  # rebuilt from the ledger
        raise RuntimeError("a budget's key vanished while being rebuilt")

    def settle(self, ticket: str, scopes: Sequence[Scope], cost: Decimal) -> None:
        """The hold becomes the request's real cost (0: it was not sent, and nothing was spent)."""
        self._settle(keys=self._keys(scopes), args=[ticket, to_nano(cost)])

    def release(self, ticket: str, scopes: Sequence[Scope]) -> None:
        self.settle(ticket, scopes, Decimal(0))

    def standing(self, scope: Scope) -> Standing:
        """What ``scope`` has spent and holds now (rebuilt from the ledger if Redis has lost it)."""
        keys = [self._hash(scope), f"{self._hash(scope)}:holds"]
        # The ledger is read only when Redis lacks the budget: HSETNX keeps what Redis has.
        spent = Decimal(0) if self._client.hexists(keys[0], "spent") else self._ledger(scope)
        answer = [_text(part) for part in self._read(keys=keys, args=[to_nano(spent), scope.keep_seconds()])]
        return Standing(from_nano(answer[0]), from_nano(answer[1]), int(answer[2]))

    def _hash(self, scope: Scope) -> str:
        return scope.key(self._namespace)

    def _keys(self, scopes: Sequence[Scope]) -> list[str]:
        return [key for scope in scopes for key in (self._hash(scope), f"{self._hash(scope)}:holds")]


def _text(part: object) -> str:
    return part.decode() if isinstance(part, bytes) else str(part)


class OverBudget(OverQuota):
    """The tenant's day's or month's budget is spent: no job is taken until it resets or is raised (429)."""

    def __init__(self, message: str, resets_at: datetime) -> None:
        super().__init__(message)
        self.resets_at = resets_at


def refuse_when_spent(session: Session, job: Job, settings: Settings, budgets: Budgets | None) -> None:
    """A new main job of a tenant whose day's or month's budget cannot hold even one request of the job (no input,
    its whole ``max_tokens`` of reply) is refused, saying when the budget resets. ``budgets``: the shared ones
    (None: the ledger alone, for a service without a shared Redis)."""
    try:
        prices = prices_of(job.model, settings)
    except Unpriced:
        return
    smallest = worst_case(prices, input_tokens=0, max_output_tokens=job.max_output_tokens)
    at = datetime.now(UTC)
    for scope in tenant_scopes(job.tenant_id, tenant_limits(session, job.tenant_id, settings), at):
        if scope.limit is None or scope.end is None:
            continue
        standing = _standing_or_ledger(session, scope, budgets)
        if standing.spent + standing.held + smallest > scope.limit:
            hours, rest = divmod(int((scope.end - at).total_seconds()), 3600)
            raise OverBudget(
                f"this tenant's {scope.kind}'s budget of {scope.limit:.2f} USD is spent ({standing.spent:.2f} USD "
                f"spent, {standing.held:.2f} USD held by requests in flight): no new job until it resets at "
                f"{scope.end:%Y-%m-%d %H:%M} UTC (in {hours} h {rest // 60} min), or until the operator raises it "
                f"({scope.where})",
                scope.end,
            )


def _standing_or_ledger(session: Session, scope: Scope, budgets: Budgets | None) -> Standing:
    """The budget's standing in the shared Redis, or from the ledger alone where there is none or it cannot be
    reached (what requests in flight hold is not known then: the workers' reservations still guard the budget)."""
    if budgets is not None:
        try:
            return budgets.standing(scope)
        except redis.RedisError as error:
            logger.warning("budgets unavailable when a job was submitted (%s): the ledger alone", type(error).__name__)
    return Standing(spent_in_ledger(session, scope), Decimal(0))
