"""Clearing tool results where the provider's prompt cache makes it cheapest: the cache-economic policy.

A provider caches a request's prefix. Clearing a result changes the request from that result on, so everything
after it is written again (1.25x an uncached token at Anthropic) where it would have been read (0.1x). Three
choices follow, each made from what the caller knows (:class:`CacheView`), never from a clock:

- **How much.** When the request no longer fits, results are cleared down to a low-water mark
  (:attr:`Economy.low_water` of the budget, and low enough that :data:`RUNWAY` more calls of the newest rounds'
  mean size fit), not just below the budget: the next several calls then add to an unchanged prefix and read it
  from the cache, instead of rewriting it every call or two.
- **Where.** The oldest results within :attr:`Economy.pin` of the budget stay whole: they are a head that never
  changes, so every rewrite starts after it. Among the other results, large ones are cleared before small ones
  (sizes compared in factors of four, the older first within a factor): one 60k-token traceback frees more than
  forty small results, changes the prefix at one place and leaves more results whole.
- **When.** What the previous request cleared stays cleared while the request fits (``previous_cleared``), so
  the prefix does not move. When the cache has gone cold anyway (``idle_seconds`` at least the TTL), the whole
  prefix is paid again whatever we send: if the request is in the upper half between the low-water mark and the
  budget, the clearing starts afresh down to the low-water mark, and the next warm stretch is as long as it can
  be. A provider that caches nothing gets the least clearing that fits (as much context as the budget allows).

Lowest cost per kept token alone would clear everything (the fixed cost of each new result is then spread over
nothing); the low-water mark is how much context the caller is willing to trade for cache reads. The defaults
(clear down to 80 %, pin 40 %) are where ``bench.cost_frontier`` meets issue 10's goals with the most context;
the pin is also a choice about *which* context the model sees: the first results of the job stay in view.

The policy needs the caller's memory of the previous request (``previous_cleared``): without it every call is
planned as cold, from scratch, and the cleared set may move from one call to the next. A caller that keeps no
state should use :func:`plimsoll.fit` (batches of four), whose choices depend on the history alone.

Everything ``fit`` promises holds: the request fits the budget, a tool call is never split from its result, the
newest round (every result of parallel calls) stays whole, the input is not changed, the same input gives the
same plan. When clearing alone cannot fit, the plan is :func:`plimsoll.fitting.plan_history`'s (stages 2 and 3).
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from plimsoll.estimate import Profile
from plimsoll.fitting import (
    ELIGIBLE_FACTOR,
    KEEP_SHARE,
    Fit,
    Plan,
    apply_plan,
    history_to_fit,
    note_costs,
    plan_history,
    protected_from,
)
from plimsoll.history import History, from_outlines
from plimsoll.messages import Message, Outline
from plimsoll.profiles import get_profile

ANTHROPIC_TTL_SECONDS = 300.0  # Anthropic's default cache lifetime; "1h" breakpoints live 3,600 s
RUNWAY = 2  # after clearing, at least this many more calls of the recent rounds' size fit before the next
RECENT_ROUNDS = 8  # the growth per call is the mean size of this many newest rounds


@dataclass(frozen=True)
class CacheView:
    """What the caller knows about the provider's prompt cache for this job."""

    caches: bool = True  # the provider caches prompts at all
    ttl_seconds: float = ANTHROPIC_TTL_SECONDS
    idle_seconds: float | None = None  # since the job's previous request; None: unknown, taken as warm
    previous_cleared: Collection[str] | None = None  # tool_use_ids the previous request cleared; None: no request

    @property
    def cold(self) -> bool:
        """Nothing of this job is cached: no previous request, or it was longer ago than the TTL."""
        if self.previous_cleared is None:
            return True
        return self.idle_seconds is not None and self.idle_seconds >= self.ttl_seconds


@dataclass(frozen=True)
class Economy:
    """The policy's two knobs, as shares of the budget."""

    low_water: float = 0.8  # when clearing, clear down to this share of the budget
    pin: float = 0.4  # the oldest results within this share stay whole: the prefix never changes before them

    def __post_init__(self) -> None:
        if not 0 < self.low_water <= 1 or not 0 <= self.pin < 1:
            raise ValueError(f"low_water must be in (0, 1] and pin in [0, 1), got {self.low_water}, {self.pin}")


@dataclass(frozen=True)
class CachePlan:
    plan: Plan
    # Indices of request messages that end a prefix expected to stay unchanged over the next calls, oldest first:
    # the end of the pinned head, and the message before the oldest result the next clearing may touch. Put a
    # cache breakpoint on each (and, as always, on the last message).
    breakpoints: tuple[int, ...]
    cold: bool  # planned as if nothing were cached (the caller pays the whole prefix anyway)


def growth_per_call(tokens: Sequence[int]) -> int:
    """Tokens a call adds, going by the newest rounds (an assistant message and the user message answering it)."""
    rounds = min(RECENT_ROUNDS, (len(tokens) - 1) // 2)
    return sum(tokens[len(tokens) - 2 * rounds :]) // rounds if rounds else 0


def _order(candidates: Sequence[tuple[int, int, str]], note: int) -> list[tuple[int, int, str]]:
    """Large first (what clearing saves, in factors of four), the older first among results of about that size."""
    return sorted(candidates, key=lambda r: (-((r[1] - note).bit_length() // 2), r[0]))


def _clear_until(order: Sequence[tuple[int, int, str]], size: int, target: int, note: int) -> tuple[set[str], int]:
    """Clear results in ``order`` until the request is within ``target``; what was chosen and the size reached."""
    chosen: set[str] = set()
    for _, tokens, rid in order:
        if size <= target:
            break
        chosen.add(rid)
        size -= tokens - note
    return chosen, size


def plan_economic(
    history: History,
    budget: int,
    *,
    profile: Profile,
    overhead: int = 0,
    cache: CacheView = CacheView(),
    economy: Economy = Economy(),
) -> CachePlan:
    """Decide what to send. Raises :class:`~plimsoll.fitting.DoesNotFit` when nothing we may send fits."""
    total = overhead + sum(history.tokens)
    if total <= budget:
        return CachePlan(Plan("as_is", total, 1, (), (), "none"), (), cache.cold)
    note = note_costs(profile).cleared_result
    results = history.results
    smallest = ELIGIBLE_FACTOR * note
    eligible = [r for r in results[: protected_from(results, budget // KEEP_SHARE)] if r[1] >= smallest]
    pinned: list[tuple[int, int, str]] = []
    room = int(economy.pin * budget) if cache.caches else 0
    for result in eligible:
        if result[1] > room:
            break
        pinned.append(result)
        room -= result[1]
    free = eligible[len(pinned) :]
    low = min(int(economy.low_water * budget), budget - RUNWAY * growth_per_call(history.tokens))

    def size_with(cleared: Collection[str]) -> int:
        return total - sum(tokens - note for _, tokens, rid in eligible if rid in cleared)

    if not cache.caches:  # nothing to reuse: the least clearing that fits, oldest first
        cleared, size = _clear_until(eligible, total, budget, note)
    else:
        kept = set(cache.previous_cleared or ()) & {rid for _, _, rid in eligible}
        size = size_with(kept)
        deepen = size > budget or (cache.cold and size > (low + budget) // 2)
        if deepen and cache.cold:
            kept, size = set(), total
        cleared = set(kept)
        if deepen:
            more, size = _clear_until(_order([r for r in free if r[2] not in kept], note), size, low, note)
            cleared |= more
        if size > budget:  # the pinned head too, oldest first, only as far as the budget needs
            more, size = _clear_until([r for r in pinned if r[2] not in cleared], size, budget, note)
            cleared |= more
    if size > budget:
        chosen = plan_history(history, budget, profile=profile, overhead=overhead)
        return CachePlan(chosen, (), cache.cold)
    in_order = [r for r in eligible if r[2] in cleared]
    chosen = Plan(
        "cleared_results",
        size,
        1,
        tuple(rid for _, _, rid in in_order),
        tuple(sorted({index for index, _, _ in in_order})),
        "none",
    )
    # The next clearing changes the request at the oldest result it may clear: one not pinned, not cleared yet,
    # big enough (the protected ones become clearable as the history grows).
    held = {rid for _, _, rid in pinned} | cleared
    changing = [index for index, tokens, rid in results if tokens >= smallest and rid not in held]
    head_end = free[0][0] if free else min(changing, default=len(history))
    stable = min(changing, default=len(history))
    marks = tuple(sorted({head_end - 1, stable - 1} - {len(history) - 1}))
    return CachePlan(chosen, marks, cache.cold)


def plan_cached(
    outlines: Sequence[Outline],
    budget: int,
    *,
    profile: str | Profile = "claude",
    overhead: int = 0,
    cache: CacheView = CacheView(),
    economy: Economy = Economy(),
) -> CachePlan:
    """:func:`plan_economic` from stored outlines (build the request with :func:`plimsoll.build_request`)."""
    return plan_economic(
        from_outlines(outlines), budget, profile=get_profile(profile), overhead=overhead, cache=cache, economy=economy
    )


def fit_cached(
    messages: Sequence[Message],
    budget: int,
    *,
    estimates: Sequence[int] | None = None,
    profile: str | Profile = "claude",
    overhead: int = 0,
    cache: CacheView = CacheView(),
    economy: Economy = Economy(),
) -> tuple[Fit, tuple[int, ...]]:
    """``fit`` under the cache-economic policy: the request, and its :attr:`CachePlan.breakpoints`."""
    history, chosen_profile = history_to_fit(messages, budget, estimates, profile)
    chosen = plan_economic(history, budget, profile=chosen_profile, overhead=overhead, cache=cache, economy=economy)
    plan = chosen.plan
    request = apply_plan(messages, plan)
    return Fit(request, plan.stage, plan.tokens, plan.cleared, plan.dropped), chosen.breakpoints
