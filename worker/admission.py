"""Admission: before a step sends its request, it reserves what the request will count against the provider's
rate limits from a limiter in Redis that every worker on every machine shares.

The algorithm is a token bucket per limit (requests, input tokens, output tokens per minute, per provider and
model class), as the providers describe their own limits, that *lends ahead*: a reservation always takes its
tokens, and when the bucket goes into debt the step is told when its turn comes (the time the debt is paid back
by the refill). This is GCRA's virtual scheduling in token-bucket form. It was chosen over a plain refuse-and-retry
bucket because reservations are served in the order they were made: a 180k-token request is not starved by a
stream of small ones that would always find room first, and a step that must wait knows for how long, so it goes
back to the broker once with that countdown instead of polling. One Lua script does each step atomically on
Redis's clock (``TIME``), so workers on machines with skewed clocks agree.

- The reservation is the request's planned uncached input (the cached prefix is left out where the provider does
  not count cache reads) and its ``max_tokens``; after the reply the real usage corrects it (``settle``).
- Limits are learned from the answers' ``*-ratelimit-*`` headers and can be set per provider and model class
  (``PLIMSOLL_RATE_LIMITS``); what the answers say is ``remaining`` lowers the bucket, and the share of the limit
  the fleet takes is learned (up a little with every answer, down by 15 % on a 429, at most once in 10 s, never
  under half), so
  another client of the same key is accounted for. Without any known limit, a step is admitted at once.
- A reservation is kept under the step's ticket (job and step) until settled, so a step that comes back after its
  wait, or is delivered twice, does not reserve twice. The ticket keeps its place in line (how much had been
  reserved from the bucket, itself included); when the step comes back, its turn is checked again against the
  bucket as answers have corrected it since (the learned share, ``remaining``, real usage), and a step whose turn
  was told too early (another client of the key took more than the share assumed) waits the difference instead of
  being refused by the provider.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass

import redis

from worker.providers.base import Usage
from worker.rate_limits import KINDS, Budget, model_class

logger = logging.getLogger(__name__)

TICKET_SECONDS = 24 * 3600  # a reservation whose step never came back is forgotten after this long
BUCKET_IDLE_SECONDS = 600  # a bucket untouched this long is full again anyway (a minute refills it)
# Headroom kept in every bucket, as a share of its limit: what another client of the key may take beyond the
# share learned, between two answers' ``remaining`` (which correct the bucket). Under a steady backlog it costs no
# throughput (the bucket hovers at the margin instead of at zero: a one-time 1.2 s of a minute's worth).
MARGIN = 0.02
CACHE_READS_COUNTED = {"openai": True}  # providers whose input-token limit counts cache reads (Anthropic: not)

# KEYS: limits, bucket per kind (3), ticket. ARGV: cost per kind (3), limit set by configuration per kind (3,
# 0: learned), ticket seconds, bucket idle seconds, margin. Returns the seconds until the ticket's turn (<= 0: now).
_RESERVE = """
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local names = {'requests', 'input_tokens', 'output_tokens'}
local function limit_of(i)
  local limit = tonumber(ARGV[3 + i])
  if limit <= 0 then limit = tonumber(redis.call('HGET', KEYS[1], names[i]) or '0') end
  return limit
end
local function rate_of(limit)
  return limit / 60 * tonumber(redis.call('HGET', KEYS[1], 'share') or '1')
end
-- What a bucket must still hold once a request of ``cost`` is taken: a margin (ARGV[9], a share of the limit, in
-- whole requests or tokens)
-- for what other clients of the key take beyond the share learned between two answers, at most what a full bucket
-- leaves; a request larger than a minute's worth goes when the bucket was full before it, as the provider takes it.
local function after(cost, limit)
  if cost > limit then return limit - cost end
  return math.min(math.floor(limit * tonumber(ARGV[9])), limit - cost)
end
local latest = now
local ready = redis.call('HGET', KEYS[5], 'ready')
if ready then
  -- Charged already: the ticket goes when the bucket's credit (its level plus all ever reserved from it) reaches
  -- its place in line, at today's rate and after every correction since it was told its turn, so a turn computed
  -- with a share or a level that answers have since corrected is not taken early.
  local placed = false
  for i = 1, 3 do
    local place = tonumber(redis.call('HGET', KEYS[5], 'place_' .. names[i]) or '')
    local limit = limit_of(i)
    if place and limit > 0 then
      placed = true
      local rate = rate_of(limit)
      local state = redis.call('HMGET', KEYS[1 + i], 'level', 'at', 'reserved')
      local reserved = tonumber(state[3]) or 0
      if place <= reserved then  -- else the bucket was forgotten (idle) since: it is full, go
        local since = math.max(0, now - (tonumber(state[2]) or now))
        local level = math.min(limit, (tonumber(state[1]) or limit) + since * rate)
        redis.call('HSET', KEYS[1 + i], 'level', level, 'at', now)
        local cost = tonumber(redis.call('HGET', KEYS[5], names[i]) or '0')
        local short = place + after(cost, limit) - (level + reserved)
        if short > 0 then latest = math.max(latest, now + short / rate) end
      end
    end
  end
  if not placed then return tostring(tonumber(ready) - now) end
  redis.call('HSET', KEYS[5], 'ready', latest)
  return tostring(latest - now)
end
local charged = {}
for i = 1, 3 do
  local limit = limit_of(i)
  if limit > 0 then
    local cost = tonumber(ARGV[i])
    local rate = rate_of(limit)
    local state = redis.call('HMGET', KEYS[1 + i], 'level', 'at', 'held', 'reserved')
    local level = tonumber(state[1]) or limit
    local at = tonumber(state[2]) or now
    level = math.min(limit, level + math.max(0, now - at) * rate) - cost
    local reserved = (tonumber(state[4]) or 0) + cost
    local floor = after(cost, limit)
    if level < floor then latest = math.max(latest, now + (floor - level) / rate) end
    redis.call('HSET', KEYS[1 + i], 'level', level, 'at', now, 'held', (tonumber(state[3]) or 0) + cost,
      'reserved', reserved)
    redis.call('EXPIRE', KEYS[1 + i], ARGV[8])
    table.insert(charged, names[i])
    table.insert(charged, cost)
    table.insert(charged, 'place_' .. names[i])
    table.insert(charged, reserved)
  end
end
if #charged == 0 then return '0' end
redis.call('HSET', KEYS[5], 'ready', latest, unpack(charged))
redis.call('EXPIRE', KEYS[5], ARGV[7])
return tostring(latest - now)
"""

# KEYS: as above. ARGV: used per kind (3), configured limit per kind (3), stated limit per kind (3, 0: not
# stated), stated remaining per kind (3, -1: not stated), bucket idle seconds, 1 if the provider refused it.
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
    local state = redis.call('HMGET', KEYS[1 + i], 'level', 'at', 'held')
    local level = tonumber(state[1]) or limit
    local at = tonumber(state[2]) or now
    local charged = tonumber(redis.call('HGET', KEYS[5], names[i]) or '0')
    local held = math.max(0, (tonumber(state[3]) or 0) - charged)
    level = math.min(limit, level + math.max(0, now - at) * rate) + charged - tonumber(ARGV[i])
    local remaining = tonumber(ARGV[9 + i])
    -- the provider's view: what it has left, less what we hold for requests it has not seen yet
    if remaining >= 0 then level = math.min(level, remaining - held) end
    redis.call('HSET', KEYS[1 + i], 'level', level, 'at', now, 'held', held)
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

    def keys(self) -> list[str]:
        # One hash tag per limit group, so that a Redis Cluster keeps a script's keys on one node.
        group = f"plimsoll:ratelimit:{{{self.provider}/{model_class(self.model)}}}"
        return [
            f"{group}:limits",
            *(f"{group}:bucket:{kind}" for kind in KINDS),
            f"{group}:ticket:{self.job_id}:{self.step}",
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
        """Reserve the request's share of every known limit; the seconds until it may be sent (0: now)."""
        costs = [1, max(0, input_tokens), max(0, output_tokens)]
        wait = self._reserve(
            keys=ticket.keys(),
            args=[*costs, *self._limits(ticket), TICKET_SECONDS, BUCKET_IDLE_SECONDS, MARGIN],
        )
        return max(0.0, float(wait))

    def settle(
        self,
        ticket: Ticket,
        *,
        sent: bool,
        usage: Usage | None,
        stated: Mapping[str, Budget],
        refused: bool = False,
    ) -> None:
        """Correct the reservation by what the request really counted (nothing when it was refused or not
        answered), and take in what the answer said of the limits."""
        used = [0, 0, 0]
        if usage is not None:
            counted_input = usage.input_tokens + usage.cache_write_tokens
            if CACHE_READS_COUNTED.get(ticket.provider, False):
                counted_input += usage.cache_read_tokens
            used = [1 if sent else 0, counted_input, usage.output_tokens]
        stated_limits = [stated[kind].limit if kind in stated else 0 for kind in KINDS]
        stated_remaining = [stated[kind].remaining if kind in stated else -1 for kind in KINDS]
        args = [*used, *self._limits(ticket), *stated_limits, *stated_remaining, BUCKET_IDLE_SECONDS, int(refused)]
        self._settle(keys=ticket.keys(), args=args)

    def _limits(self, ticket: Ticket) -> list[int]:
        configured = self._configured.get(f"{ticket.provider}/{model_class(ticket.model)}", {})
        return [int(configured.get(kind, 0)) for kind in KINDS]


def planned_input(*, tokens: int, provider: str, cached_prefix: int) -> int:
    """What a request of ``tokens`` input tokens counts against the input limit, when ``cached_prefix`` of them
    are expected to be read from the prompt cache."""
    if CACHE_READS_COUNTED.get(provider, False):
        return tokens
    return max(0, tokens - cached_prefix)
