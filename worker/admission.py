"""Admission: before a step sends its request, it reserves what the request will count against the provider's
rate limits from a limiter in Redis that every worker on every machine shares.

The algorithm is a token bucket per limit (requests, input tokens, output tokens per minute, per provider and
model class), as the providers describe their own limits, with a *line* in front of it: a step that does not fit
now takes a place in the line and is told when its turn comes (the time the refill covers every request ahead of
it and its own), so it goes back to the broker once with that countdown instead of polling, and comes back to be
admitted. This is GCRA's virtual scheduling in token-bucket form: a 180k-token request is not starved by a stream
of small ones that would always find room first, because nobody behind it in the line is admitted before the
bucket holds what is ahead of them. One Lua script does each step atomically on Redis's clock (``TIME``), so
workers on machines with skewed clocks agree.

The line is ordered fairly between tenants, by start-time fair queueing (SFQ, Goyal et al. 1996; a weighted fair
queueing in which every tenant weighs the same): each request is tagged with a virtual start time, the later of
the line's virtual time and the finish of the same tenant's previous request, and a request's size is counted in
seconds of its most constrained limit. So a tenant that queued 30 jobs' requests has tags far ahead, and another
tenant's first request takes its place at the line's virtual time, before them: each tenant with steps waiting
gets the same share of the limit, in tokens, not in steps (steps differ 100-fold in size). Tags, the line and
every place in it live in Redis (``{group}:tags``, ``{group}:line``, ``{group}:due``), shared by every worker on
every machine. A step that does not come back within ``LATENESS_SECONDS`` of its turn (its job cancelled, its
message lost until the reconciler sends it again) is taken out of the line and takes its place again when it
comes back.

- The reservation is the request's planned uncached input (the cached prefix is left out where the provider does
  not count cache reads) and its ``max_tokens``; after the reply the real usage corrects it (``settle``). The
  input is the estimate at the job's mean ratio of counted to estimated tokens (``Calibrator.pacing_factor``), not
  at the safe factor that fits requests into budgets, and the cached prefix is taken at the same ratio: the steps
  behind a reservation are told their turn from it, before its correction.
- Limits are learned from the answers' ``*-ratelimit-*`` headers and can be set per provider and model class
  (``PLIMSOLL_RATE_LIMITS``); what the answers say is ``remaining`` lowers the bucket, and the share of the limit
  the fleet takes is learned (up a little with every answer, down by 15 % on a 429, at most once in 10 s, never
  under half), so
  another client of the same key is accounted for. Without any known limit, a step is admitted at once.
- A reservation is kept under the step's ticket (job and step) until settled, so a step that comes back after its
  wait, or is delivered twice, keeps its place and does not reserve twice.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from worker.names import RATE_LIMIT_KEYS
from worker.providers.base import Usage
from worker.rate_limits import KINDS, Budget, model_class

logger = logging.getLogger(__name__)

TICKET_SECONDS = 24 * 3600  # a reservation whose step never came back is forgotten after this long
BUCKET_IDLE_SECONDS = 600  # a bucket untouched this long is full again anyway (a minute refills it)
LATENESS_SECONDS = 60  # a step this late for its turn is taken out of the line (it takes its place again later)
# Headroom kept in every bucket, as a share of its limit: what another client of the key may take beyond the
# share learned, between two answers' ``remaining`` (which correct the bucket). Under a steady backlog it costs no
# throughput (the bucket hovers at the margin instead of at zero: a one-time 1.2 s of a minute's worth).
MARGIN = 0.02
CACHE_READS_COUNTED = {"openai": True}  # providers whose input-token limit counts cache reads (Anthropic: not)

# KEYS: limits, bucket per kind (3), ticket, line, tags, due, held. ARGV: cost per kind (3), limit set by configuration
# per kind (3, 0: learned), ticket seconds, bucket idle seconds, tenant, lateness seconds, ticket id, margin.
# Returns the seconds until the ticket's turn (<= 0: go now, its cost taken from the buckets).
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local ticket_key, line, tags, due = KEYS[5], KEYS[6], KEYS[7], KEYS[8]
if redis.call('HGET', ticket_key, 'admitted') then return '0' end
local names = {'requests', 'input_tokens', 'output_tokens'}
local share = tonumber(redis.call('HGET', KEYS[1], 'share') or '1')
local limits, rates, levels, costs = {}, {}, {}, {}
local known = false
local size = 0  -- the request's size in seconds of its most constrained limit: what fairness counts
for i = 1, 3 do
  local limit = tonumber(ARGV[3 + i])
  if limit <= 0 then limit = tonumber(redis.call('HGET', KEYS[1], names[i]) or '0') end
  limits[i], costs[i] = limit, tonumber(ARGV[i])
  if limit > 0 then
    known = true
    rates[i] = limit / 60 * share
    local state = redis.call('HMGET', KEYS[1 + i], 'level', 'at')
    local level = tonumber(state[1]) or limit
    local at = tonumber(state[2]) or now
    levels[i] = math.min(limit, level + math.max(0, now - at) * rates[i])
    size = math.max(size, costs[i] * 60 / limit)
  end
end
if not known then return '0' end
-- Its place in the line: start-time fair queueing. A tenant's next request starts where its previous one
-- finished, or at the line's virtual time if the tenant has nothing waiting; the line is served in start order.
local tag = tonumber(redis.call('HGET', ticket_key, 'tag') or '')
local member = redis.call('HGET', ticket_key, 'member')
local tenant = ARGV[9]
if not tag then
  local virtual = tonumber(redis.call('HGET', tags, '_virtual') or '0')
  tag = math.max(virtual, tonumber(redis.call('HGET', tags, tenant) or '0'))
  redis.call('HSET', tags, tenant, tag + size)
  local seq = redis.call('HINCRBY', tags, '_seq', 1)
  member = string.format('%015d|%s|%s|%d|%d|%d|%.3f', seq, tenant, ARGV[11], costs[1], costs[2], costs[3], now)
  redis.call('HSET', ticket_key, 'tag', tag, 'member', member)
end
redis.call('ZADD', line, tag, member)
-- What waits ahead of it in the line (a step long overdue is taken as gone; it takes its place again if it
-- comes back), and whether the buckets hold that and this request too.
local ahead = {0, 0, 0}
local lateness = tonumber(ARGV[10])
local others = redis.call('ZRANGEBYSCORE', line, '-inf', tag, 'WITHSCORES')
for n = 1, #others, 2 do
  local other, score = others[n], tonumber(others[n + 1])
  if score < tag or (score == tag and other < member) then
    local when = tonumber(redis.call('HGET', due, other) or tostring(now))
    if now - when > lateness then
      redis.call('ZREM', line, other)
      redis.call('HDEL', due, other)
    else
      local _, _, c1, c2, c3 = string.find(other, '^[^|]*|[^|]*|[^|]*|(%d+)|(%d+)|(%d+)|')
      ahead[1], ahead[2], ahead[3] = ahead[1] + tonumber(c1), ahead[2] + tonumber(c2), ahead[3] + tonumber(c3)
    end
  end
end
local wait = 0
for i = 1, 3 do
  if limits[i] > 0 then
    -- what the bucket must still hold after it: a margin (a share of the limit, whole units) for what other
    -- clients of the key take beyond the learned share between two answers; a request larger than a minute's
    -- worth goes when the bucket was full before it, as the provider takes it
    local floor = limits[i] - costs[i]
    if costs[i] <= limits[i] then floor = math.min(math.floor(limits[i] * tonumber(ARGV[12])), floor) end
    local short = floor - (levels[i] - ahead[i] - costs[i])
    if short > 0 then wait = math.max(wait, short / rates[i]) end
  end
end
local keep = ARGV[7]
if wait > 0 then
  redis.call('HSET', due, member, now + wait)
  for _, key in ipairs({ticket_key, line, tags, due}) do redis.call('EXPIRE', key, keep) end
  return tostring(wait)
end
local charged = {}
for i = 1, 3 do
  if limits[i] > 0 then
    redis.call('HSET', KEYS[1 + i], 'level', levels[i] - costs[i], 'at', now)
    redis.call('EXPIRE', KEYS[1 + i], ARGV[8])
    table.insert(charged, names[i])
    table.insert(charged, costs[i])
  end
end
redis.call('ZREM', line, member)
redis.call('HDEL', due, member)
local virtual = tonumber(redis.call('HGET', tags, '_virtual') or '0')
redis.call('HSET', tags, '_virtual', math.max(virtual, tag))
-- held until settled, by when it was admitted: an answer's ``remaining`` has not seen what was admitted after it
local held = string.format('%s|%d|%d|%d', ARGV[11], costs[1], costs[2], costs[3])
redis.call('ZADD', KEYS[9], now, held)
redis.call('HSET', ticket_key, 'admitted', 1, 'held', held, unpack(charged))
for _, key in ipairs({ticket_key, tags, KEYS[9]}) do redis.call('EXPIRE', key, keep) end
return '0'
"""

# KEYS: as above. ARGV: used per kind (3), configured limit per kind (3), stated limit per kind (3, 0: not
# stated), stated remaining per kind (3, -1: not stated), bucket idle seconds, 1 if the provider refused it, seconds
# since the answer arrived.
# The share of the limit we take (another client of the key takes the rest) is learned additively up on every
# answer and multiplicatively down on refusals (AIMD), as TCP learns its share of a link.
_SETTLE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local names = {'requests', 'input_tokens', 'output_tokens'}
local share = tonumber(redis.call('HGET', KEYS[1], 'share') or '1')
local cut_at = tonumber(redis.call('HGET', KEYS[1], 'cut_at') or '0')
if ARGV[14] == '1' and now - cut_at >= 10 then
  -- refused: down 15 %, never under half, at most once in 10 s (refusals of requests sent together are one signal)
  share = math.max(0.5, share * 0.85)
  redis.call('HSET', KEYS[1], 'cut_at', now)
elseif tonumber(ARGV[1]) > 0 then
  share = math.min(1, share + 0.003)  -- answered: up a little
end
redis.call('HSET', KEYS[1], 'share', share)
-- What we hold for requests the provider had not seen when it answered: those admitted after the answer arrived
-- (one admitted before it was sent before it, and the provider counts a request as it arrives). Counting the rest
-- against ``remaining`` would count them twice and keep the bucket low for good.
local mine = redis.call('HGET', KEYS[5], 'held')
if mine then redis.call('ZREM', KEYS[9], mine) end
redis.call('ZREMRANGEBYSCORE', KEYS[9], '-inf', now - tonumber(ARGV[13]))
local unseen = {0, 0, 0}
for _, held in ipairs(redis.call('ZRANGEBYSCORE', KEYS[9], '(' .. (now - tonumber(ARGV[15])), '+inf')) do
  local _, _, c1, c2, c3 = string.find(held, '|(%d+)|(%d+)|(%d+)$')
  unseen[1], unseen[2], unseen[3] = unseen[1] + tonumber(c1), unseen[2] + tonumber(c2), unseen[3] + tonumber(c3)
end
for i = 1, 3 do
  local stated = tonumber(ARGV[6 + i])
  if stated > 0 then
    redis.call('HSET', KEYS[1], names[i], stated)
    redis.call('EXPIRE', KEYS[1], ARGV[13])  -- a limit no answer states any more is forgotten
  end
  local limit = tonumber(ARGV[3 + i])
  if limit <= 0 then limit = tonumber(redis.call('HGET', KEYS[1], names[i]) or '0') end
  if limit > 0 then
    local rate = limit / 60 * share
    local state = redis.call('HMGET', KEYS[1 + i], 'level', 'at')
    local level = tonumber(state[1]) or limit
    local at = tonumber(state[2]) or now
    local charged = tonumber(redis.call('HGET', KEYS[5], names[i]) or '0')
    level = math.min(limit, level + math.max(0, now - at) * rate) + charged - tonumber(ARGV[i])
    local remaining = tonumber(ARGV[9 + i])
    -- the provider's view: what it has left, less what we hold for requests it has not seen yet
    if remaining >= 0 then level = math.min(level, remaining - unseen[i]) end
    redis.call('HSET', KEYS[1 + i], 'level', level, 'at', now)
    redis.call('EXPIRE', KEYS[1 + i], ARGV[13])
  end
end
redis.call('DEL', KEYS[5])
redis.call('EXPIRE', KEYS[1], ARGV[13])
return 'ok'
"""


@dataclass(frozen=True)
class Ticket:
    """One step's request, as the limiter knows it."""

    provider: str
    model: str
    job_id: int
    step: int
    tenant: int = 0  # whose share of the line it takes
    endpoint: str = ""  # the host the request goes to: each endpoint's limits are its own (models/endpoints.py)

    def keys(self) -> list[str]:
        # One hash tag per limit group, so that a Redis Cluster keeps a script's keys on one node.
        at = f"@{self.endpoint}" if self.endpoint else ""
        group = f"{RATE_LIMIT_KEYS}{{{self.provider}/{model_class(self.model)}{at}}}"
        return [
            f"{group}:limits",
            *(f"{group}:bucket:{kind}" for kind in KINDS),
            f"{group}:ticket:{self.job_id}:{self.step}",
            f"{group}:line",
            f"{group}:tags",
            f"{group}:due",
            f"{group}:held",
        ]


class Limiter:
    """The shared limiter. ``configured``: limits per ``provider/model-class`` set by configuration, e.g.
    ``{"anthropic/claude-sonnet": {"input_tokens": 1800000}}``; they win over what answers say."""

    def __init__(self, client: redis.Redis, configured: Mapping[str, Mapping[str, int]] | None = None) -> None:
        self._client = client
        self._configured = configured or {}
        self._reserve = client.register_script(_RESERVE)
        self._settle = client.register_script(_SETTLE)

    def reserve(self, ticket: Ticket, *, input_tokens: int, output_tokens: int) -> float:
        """Reserve the request's share of every known limit when its turn has come (0: send it now, its share
        taken); otherwise its place in the line is kept and the seconds until its turn are returned."""
        costs = [1, max(0, int(input_tokens)), max(0, int(output_tokens))]
        args = [*costs, *self._limits(ticket), TICKET_SECONDS, BUCKET_IDLE_SECONDS, ticket.tenant, LATENESS_SECONDS]
        wait = self._reserve(keys=ticket.keys(), args=[*args, f"{ticket.job_id}:{ticket.step}", MARGIN])
        return max(0.0, float(wait))

    def settle(
        self,
        ticket: Ticket,
        *,
        sent: bool,
        usage: Usage | None,
        stated: Mapping[str, Budget],
        refused: bool = False,
        answered_ago: float = 0.0,
    ) -> None:
        """Correct the reservation by what the request really counted (nothing when it was refused or not
        answered), and take in what the answer said of the limits (``answered_ago``: seconds since it arrived)."""
        used = [0, 0, 0]
        if usage is not None:
            counted_input = usage.input_tokens + usage.cache_write_tokens
            if CACHE_READS_COUNTED.get(ticket.provider, False):
                counted_input += usage.cache_read_tokens
            used = [1 if sent else 0, counted_input, usage.output_tokens]
        stated_limits = [stated[kind].limit if kind in stated else 0 for kind in KINDS]
        stated_remaining = [stated[kind].remaining if kind in stated else -1 for kind in KINDS]
        args = [*used, *self._limits(ticket), *stated_limits, *stated_remaining, BUCKET_IDLE_SECONDS, int(refused)]
        self._settle(keys=ticket.keys(), args=[*args, max(0.0, answered_ago)])

    def _limits(self, ticket: Ticket) -> list[int]:
        configured = self._configured.get(f"{ticket.provider}/{model_class(ticket.model)}", {})
        return [int(configured.get(kind, 0)) for kind in KINDS]


def planned_input(*, tokens: int, provider: str, cached_prefix: int) -> int:
    """What a request of ``tokens`` input tokens counts against the input limit, when ``cached_prefix`` of them
    are expected to be read from the prompt cache."""
    if CACHE_READS_COUNTED.get(provider, False):
        return tokens
    return max(0, tokens - cached_prefix)


@dataclass(frozen=True)
class Waiting:
    """Steps of one tenant waiting in the admission lines for their turn, and how long the oldest has waited."""

    steps: int
    oldest_seconds: float


def waiting_by_tenant(client: redis.Redis) -> dict[str, Waiting]:
    """Every tenant's steps waiting in the admission lines (every provider and model class), on Redis's clock."""
    seconds, micros = client.time()
    moment = seconds + micros / 1_000_000
    found: dict[str, Waiting] = {}
    for key in client.scan_iter(f"{RATE_LIMIT_KEYS}*:line"):
        for member in client.zrange(key, 0, -1):
            fields = (member.decode() if isinstance(member, bytes) else str(member)).split("|")
            tenant, since = fields[1], float(fields[6])
            known = found.get(tenant, Waiting(0, 0.0))
            found[tenant] = Waiting(known.steps + 1, max(known.oldest_seconds, moment - since))
    return found
