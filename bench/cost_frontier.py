"""What keeping context costs, policy by policy: ``python -m bench.cost_frontier``.

Every policy of ``bench.frontier_policies`` at every setting of its knob plans every request of three runs. Each
request goes through the emulator's model of Anthropic's prompt cache (``bench.cache_model``) at two prices: the
5-minute TTL (writes 1.25x) and the 1-hour TTL (writes 2x); reads 0.1x. The run's rhythm: a request every
:data:`GAP_SECONDS`, and after every :data:`PAUSE_EVERY`-th request a pause of :data:`PAUSE_SECONDS` (subagents
running, a retry backoff, a full queue): the 5-minute cache goes cold, the 1-hour one does not. The policies that
take the time since the previous request are given it.

Per point: input cost (uncached-token equivalents) and cost ÷ uncached, mean and largest request, the share of
the run's tool results sent whole in the newest request, requests over budget, prefix reuse over the calls that
need clearing. The goals of issue 10 are computed from these and printed met / NOT MET; the tables go to
``bench/results/cost_frontier.md`` and the plot (cost against mean context kept) to ``cost_frontier.png``.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from statistics import fmean
from typing import Any

from bench.agent_workload import agent_history, describe
from bench.cache_model import AnthropicCache, blocks_of, message_key
from bench.fitting import MAIN, SMALL_RESULTS, Scenario, chapter_texts, subagent_history
from bench.frontier_policies import PROFILE, Policy, sweep
from bench.goals import Goal, render_goals
from bench.provenance import header, png_metadata
from bench.report import table
from models.prices import FIVE_MINUTES, ONE_HOUR, CachePrices
from plimsoll import DoesNotFit, estimate_message
from plimsoll.messages import Message

GAP_SECONDS = 20.0
PAUSE_EVERY = 30
PAUSE_SECONDS = 420.0


@dataclass(frozen=True)
class Market:
    """A price list and whether the run pauses."""

    name: str
    pricing: CachePrices
    pauses: bool


PAUSED_5M = Market(FIVE_MINUTES.name, FIVE_MINUTES, pauses=True)
PAUSED_1H = Market(ONE_HOUR.name, ONE_HOUR, pauses=True)
STEADY_5M = Market("5-minute TTL, no pauses", FIVE_MINUTES, pauses=False)  # bench.fitting's model: issue 10's figures
PRICINGS = (PAUSED_5M, PAUSED_1H, STEADY_5M)
FRACTIONS = (0.2, 0.4, 0.6, 0.8, 1.0)  # budgets swept, as shares of the workload's budget
AGENT_FRACTIONS = (0.5, 0.75, 1.0)  # the agent run has rounds of up to 65,000 tokens
WITHIN = 0.02  # goal 1's tolerance
CURVE_ERROR = 0.005  # reading a curve between two of its points is no more exact than this
RESULTS = Path(__file__).resolve().parent / "results"
COMMAND = "python -m bench.cost_frontier"
DEFAULT_FAMILY = "Plimsoll, batches of four"  # what fit and the worker use today
ECONOMIC_FAMILY = "Plimsoll, cache-economic"
PEERS = ("clear one at a time", "keep the newest N", "ClearToolUsesEdit")


@dataclass(frozen=True)
class Workload:
    key: str
    title: str
    budget: int
    build: Callable[[], list[dict[str, Any]]]
    fractions: Sequence[float] = FRACTIONS


def chapters_workload(key: str, scenario: Scenario) -> Workload:
    return Workload(key, scenario.title, scenario.budget, lambda: subagent_history(chapter_texts(scenario)))


def workloads(scale: float = 1.0, agent_rounds: int = 200, agent_budget: int = 200_000) -> list[Workload]:
    """The three runs; ``scale`` shrinks the chapters and their budget (the tests run at a tenth)."""

    def scaled(s: Scenario) -> Scenario:
        return Scenario(s.title, s.rounds, round(s.result_tokens * scale), round(s.budget * scale))

    main, small = scaled(MAIN), scaled(SMALL_RESULTS)
    return [
        chapters_workload(
            "chapters",
            Scenario(f"{main.rounds} chapters × ~{main.result_tokens:,}", main.rounds, main.result_tokens, main.budget),
        ),
        chapters_workload(
            "small",
            Scenario(
                f"{small.rounds} results × ~{small.result_tokens:,}", small.rounds, small.result_tokens, small.budget
            ),
        ),
        Workload(
            "agent",
            f"agent-like, {agent_rounds} rounds",
            agent_budget,
            lambda: agent_history(agent_rounds),
            AGENT_FRACTIONS,
        ),
    ]


def gap_before(call: int, pauses: bool = True) -> float:
    return PAUSE_SECONDS if pauses and call and call % PAUSE_EVERY == 0 else GAP_SECONDS


# --- simulation ------------------------------------------------------------------------------------------------


@dataclass
class Stored:
    """The stored run, with what the simulation looks up per message."""

    history: list[dict[str, Any]]
    estimates: list[int] = field(init=False)
    key_of: dict[int, int] = field(init=False)  # id(message) -> key
    tokens_of_key: dict[int, int] = field(init=False)
    results: dict[str, Any] = field(init=False)  # tool_use_id -> stored content

    def __post_init__(self) -> None:
        self.estimates = [estimate_message(m, PROFILE) for m in self.history]
        self.key_of = {id(m): message_key(m) for m in self.history}
        self.tokens_of_key = {self.key_of[id(m)]: e for m, e in zip(self.history, self.estimates, strict=True)}
        self.results = {
            b["tool_use_id"]: b["content"]
            for m in self.history
            if not isinstance(m["content"], str)
            for b in m["content"]
            if b["type"] == "tool_result"
        }

    def key(self, message: Message) -> int:
        known = self.key_of.get(id(message))
        return known if known is not None else message_key(message)

    def tokens(self, message: Message, key: int) -> int:
        known = self.tokens_of_key.get(key)
        return known if known is not None else estimate_message(message, PROFILE)

    def whole(self, block: Mapping[str, Any]) -> bool:
        return bool(block["type"] == "tool_result" and block["content"] == self.results[block["tool_use_id"]])


@dataclass(frozen=True)
class Call:
    keys: list[int]
    tokens: list[int]
    blocks: list[int]
    marks: list[int]
    stored_total: int  # the whole stored history's estimate at this call
    newest_whole: bool
    whole_results: int
    results: int  # in the stored history at this call


def whole_results(request: Sequence[Message], stored: Stored) -> list[int]:
    """Indices of the request messages carrying a result sent whole."""
    return [
        i
        for i, m in enumerate(request)
        if not isinstance(m["content"], str) and any(stored.whole(b) for b in m["content"])
    ]


def plan_run(policy: Policy, stored: Stored, market: Market) -> tuple[list[Call], int]:
    """Every request of the run under ``policy``; also how many calls it could not send (nothing fits)."""
    strategy = policy.make(market.pricing.ttl_seconds)
    calls, unsendable, results = [], 0, 0
    history, estimates = stored.history, stored.estimates
    for call, end in enumerate(range(3, len(history) + 1, 2)):
        newest = history[end - 1]
        results += (
            sum(1 for b in newest["content"] if b["type"] == "tool_result")
            if isinstance(newest["content"], list)
            else 0
        )
        try:
            sent = strategy.request(history[:end], estimates[:end], gap_before(call, market.pauses))
        except DoesNotFit:
            unsendable += 1
            continue
        request, marks = sent.messages, sent.breakpoints
        keys = [stored.key(m) for m in request]
        carrying = whole_results(request, stored)
        if marks is None:
            marks = [carrying[0] - 1] if carrying and carrying[0] > 1 else []
        calls.append(
            Call(
                keys=keys,
                tokens=[stored.tokens(m, k) for m, k in zip(request, keys, strict=True)],
                blocks=[blocks_of(m) for m in request],
                marks=marks,
                stored_total=sum(estimates[:end]),
                newest_whole=keys[-1] == stored.key(newest),
                whole_results=sum(sum(1 for b in request[i]["content"] if stored.whole(b)) for i in carrying),
                results=results,
            )
        )
    return calls, unsendable


@dataclass(frozen=True)
class Point:
    workload: str
    family: str
    knob: str
    budget: int  # the point's own budget, or the workload's for policies without one
    requests: int
    unsendable: int
    over_budget: int
    mean: float
    largest: int
    whole_share: float  # of the run's tool results, sent whole in the newest request
    newest_round_whole: bool
    sent: dict[str, int]  # tokens sent over the run (the cost without a cache), by pricing
    cost: dict[str, float]  # by pricing
    read_share: dict[str, float]  # tokens read from the cache ÷ tokens sent, by pricing
    reuse_when_clearing: float  # prefix shared with the previous request ÷ tokens, over calls that need clearing
    seconds: float

    def ratio(self, pricing: str) -> float:
        return self.cost[pricing] / self.sent[pricing] if self.sent[pricing] else 0.0


def price(calls: Sequence[Call], market: Market) -> tuple[float, int]:
    cache = AnthropicCache(market.pricing)
    now, cost, read = 0.0, 0.0, 0
    for call, c in enumerate(calls):
        now += gap_before(call, market.pauses)
        usage = cache.send(c.keys, c.tokens, c.blocks, [*c.marks, len(c.keys) - 1], now)
        cost += usage.cost(market.pricing)
        read += usage.read
    return cost, read


def reuse_over(calls: Sequence[Call], budget: int) -> float:
    shared = sent = 0
    for before, now in pairwise(calls):
        if now.stored_total <= budget:
            continue
        same = 0
        for a, b in zip(before.keys, now.keys, strict=False):
            if a != b:
                break
            same += 1
        shared += sum(now.tokens[:same])
        sent += sum(now.tokens)
    return shared / sent if sent else 1.0


def run_point(workload: Workload, policy: Policy, stored: Stored) -> Point:
    started = time.perf_counter()
    budget = policy.budget or workload.budget
    runs: dict[Market | None, tuple[list[Call], int]] = {}
    priced: dict[str, tuple[float, int, int]] = {}  # cost, tokens read, tokens sent
    for market in PRICINGS:
        planned_for = market if policy.uses_ttl else None  # only the cache-economic policy is told the time
        if planned_for not in runs:
            runs[planned_for] = plan_run(policy, stored, market)
        run = runs[planned_for][0]
        priced[market.name] = (*price(run, market), sum(sum(c.tokens) for c in run))
    calls = next(iter(runs.values()))[0]  # the 5-minute run: sizes, reuse, results whole
    sizes = [sum(c.tokens) for c in calls]
    return Point(
        workload=workload.key,
        family=policy.family,
        knob=policy.knob,
        budget=budget,
        requests=len(calls),
        unsendable=max(u for _, u in runs.values()),
        over_budget=max(sum(sum(c.tokens) > budget for c in run) for run, _ in runs.values()),
        mean=fmean(sizes) if sizes else 0.0,
        largest=max(sizes, default=0),
        whole_share=calls[-1].whole_results / calls[-1].results if calls and calls[-1].results else 0.0,
        newest_round_whole=all(c.newest_whole for run, _ in runs.values() for c in run),
        sent={name: sent for name, (_, _, sent) in priced.items()},
        cost={name: cost for name, (cost, _, _) in priced.items()},
        read_share={name: read / sent if sent else 0.0 for name, (_, read, sent) in priced.items()},
        reuse_when_clearing=reuse_over(calls, budget),
        seconds=time.perf_counter() - started,
    )


def run_workload(workload: Workload, policies: Sequence[Policy] | None = None) -> list[Point]:
    stored = Stored(workload.build())
    chosen = policies if policies is not None else sweep(workload.budget, workload.fractions)
    return [run_point(workload, p, stored) for p in chosen]


# --- goals --------------------------------------------------------------------------------------------------


def line(points: Sequence[Point], family: str) -> list[Point]:
    return sorted((p for p in points if p.family == family), key=lambda p: p.mean)


def cost_at(curve: Sequence[Point], mean: float, pricing: str) -> float | None:
    """The curve's cost at ``mean`` context, linear between its points; None outside what it covers."""
    for left, right in pairwise(curve):
        if left.mean <= mean <= right.mean:
            share = (mean - left.mean) / (right.mean - left.mean) if right.mean > left.mean else 0.0
            return left.cost[pricing] + share * (right.cost[pricing] - left.cost[pricing])
    if len(curve) == 1 and curve[0].mean == mean:
        return curve[0].cost[pricing]
    return None


def safe(points: Sequence[Point]) -> bool:
    return all(p.over_budget == 0 and p.unsendable == 0 and p.newest_round_whole for p in points)


def dominance(points: Sequence[Point], family: str, pricing: str) -> Goal:
    """``family`` costs no more (within WITHIN) than any peer point keeping as much context: at each peer's mean
    context inside the range the family's sweep covers, the family's curve is compared with the peer's cost."""
    curve = line(points, family)
    worst, worst_over, compared, beaten = -math.inf, -math.inf, 0, []
    for peer in (p for p in points if p.family in PEERS):
        ours = cost_at(curve, peer.mean, pricing)
        if ours is None:
            continue
        excess = ours / peer.cost[pricing] - 1
        if peer.over_budget:  # its context is partly requests over the budget: shown, not held against us
            worst_over = max(worst_over, excess)
            continue
        compared += 1
        worst = max(worst, excess)
        if excess > WITHIN:
            beaten.append(f"{peer.family} ({peer.knob}): {excess:+.0%}")
    workload = points[0].workload if points else "?"
    text = (
        f"{workload}, {pricing}: {family} costs no more than any peer keeping as much context within the budget "
        f"(within {WITHIN:.0%}; {compared} peer points inside its range; its cost against theirs at their context, "
        f"at worst {_signed(worst)}; against peers that send requests over the budget: {_signed(worst_over)})"
        + (f" — beaten by {'; '.join(beaten)}" if beaten else "")
        + f"; no request over budget, newest round always whole: {'yes' if safe(curve) else 'NO'}"
    )
    return Goal(text, not beaten and safe(curve))


def _signed(share: float) -> str:
    return "—" if share == -math.inf else f"{share:+.1%}"


def at_budget(points: Sequence[Point], family: str, budget: int) -> Point:
    return next(p for p in points if p.family == family and p.budget == budget)


def ratio_goal(
    points: Sequence[Point],
    family: str,
    budget: int,
    pricing: str,
    *,
    below: float | None,
    at_most: float | None,
    context: float,
) -> Goal:
    ours, four = at_budget(points, family, budget), at_budget(points, DEFAULT_FAMILY, budget)
    kept = ours.mean / four.mean
    parts, met = [], kept >= 1 - context
    if below is not None:
        target = four.ratio(pricing) * (1 - below)
        parts.append(
            f"cost ÷ uncached {ours.ratio(pricing):.3f} ≤ {target:.3f} "
            f"({below:.0%} below batches of four's {four.ratio(pricing):.3f})"
        )
        met = met and ours.ratio(pricing) <= target
    if at_most is not None:
        parts.append(
            f"cost ÷ uncached {ours.ratio(pricing):.3f} ≤ {at_most} (batches of four: {four.ratio(pricing):.3f})"
        )
        met = met and ours.ratio(pricing) <= at_most
    parts.append(
        f"mean context {ours.mean:,.0f} = {kept:.1%} of batches of four's {four.mean:,.0f} (≥ {1 - context:.0%})"
    )
    return Goal(f"{ours.workload} at budget {budget:,}, {pricing}, {family}: " + "; ".join(parts), met)


def no_worse_than_four(points: Sequence[Point]) -> Goal:
    """The condition for making the cache-economic policy the default: at every budget and price it costs no more
    than batches of four at the same context (its curve at four's mean context; outside the curve's range, cost
    per kept token at the same budget), within :data:`CURVE_ERROR`, and keeps its guarantees."""
    excesses: list[tuple[float, str]] = []
    curve = line(points, ECONOMIC_FAMILY)
    for pricing in (p.name for p in PRICINGS):
        for four in line(points, DEFAULT_FAMILY):
            ours = cost_at(curve, four.mean, pricing)
            if ours is None:
                same = at_budget(points, ECONOMIC_FAMILY, four.budget)
                excess = (same.cost[pricing] / same.mean) / (four.cost[pricing] / four.mean) - 1
            else:
                excess = ours / four.cost[pricing] - 1
            excesses.append((excess, f"{four.knob}, {pricing}: {excess:+.2%}"))
    worst = max(excesses, default=(0.0, "—"))
    misses = [text for excess, text in excesses if excess > CURVE_ERROR]
    safe_all = safe(curve)
    workload = points[0].workload if points else "?"
    return Goal(
        f"{workload}: cache-economic is no worse than batches of four at any point of the sweep, within "
        f"{CURVE_ERROR:.1%} (its cost at batches of four's mean context, between its points linearly; outside its "
        f"range, cost per kept token at the same budget); closest: {worst[1]}"
        + (f" — worse at: {'; '.join(misses)}" if misses else "")
        + ("" if safe_all else "; some request over budget or newest round not whole"),
        not misses and safe_all,
    )


def goals(results: Mapping[str, Sequence[Point]], budgets: Mapping[str, int], family: str) -> list[Goal]:
    made = [dominance(points, family, pricing.name) for points in results.values() for pricing in PRICINGS]
    for market in (PAUSED_5M.name, STEADY_5M.name):
        if "chapters" in results:
            made.append(
                ratio_goal(
                    results["chapters"], family, budgets["chapters"], market, below=0.1, at_most=None, context=0.05
                )
            )
        if "small" in results:
            made.append(
                ratio_goal(results["small"], family, budgets["small"], market, below=None, at_most=0.15, context=0.1)
            )
    if "agent" in results:
        point = at_budget(results["agent"], family, budgets["agent"])
        made.append(
            Goal(
                f"agent at budget {budgets['agent']:,}, {family}: prefix reuse over calls that need clearing "
                f"{point.reuse_when_clearing:.1%} ≥ 90%",
                point.reuse_when_clearing >= 0.90,
            )
        )
    return made


# --- output ---------------------------------------------------------------------------------------------------


def points_table(points: Sequence[Point]) -> str:
    five, hour = FIVE_MINUTES.name, ONE_HOUR.name
    header = [
        "policy",
        "setting",
        "requests",
        "over budget",
        "not sendable",
        "mean request",
        "largest",
        "results whole at the end",
        "newest round always whole",
        "reuse when clearing",
        "cost, 5 min (M)",
        "÷ uncached, 5 min",
        "cache read, 5 min",
        "cost, 1 h (M)",
        "÷ uncached, 1 h",
        "÷ uncached, 5 min, no pauses",
    ]
    rows = [
        [
            p.family,
            p.knob,
            p.requests,
            p.over_budget,
            p.unsendable,
            f"{p.mean:,.0f}",
            f"{p.largest:,}",
            f"{p.whole_share:.0%}",
            "yes" if p.newest_round_whole else "no",
            f"{p.reuse_when_clearing:.1%}",
            f"{p.cost[five] / 1e6:.2f}",
            f"{p.ratio(five):.3f}",
            f"{p.read_share[five]:.0%}",
            f"{p.cost[hour] / 1e6:.2f}",
            f"{p.ratio(hour):.3f}",
            f"{p.ratio(STEADY_5M.name):.3f}",
        ]
        for p in points
    ]
    return table(header, rows)


def plot(results: Mapping[str, Sequence[Point]], titles: Mapping[str, str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(results), figsize=(6 * len(results), 5), squeeze=False)
    for axis, (key, points) in zip(axes[0], results.items(), strict=True):
        for family in dict.fromkeys(p.family for p in points):
            curve = line(points, family)
            axis.plot(
                [p.mean / 1e3 for p in curve],
                [p.cost[FIVE_MINUTES.name] / 1e6 for p in curve],
                marker="o",
                linestyle="-" if len(curve) > 1 else "none",
                label=family,
                linewidth=2.5 if family in (DEFAULT_FAMILY, ECONOMIC_FAMILY) else 1.2,
            )
        over = [p for p in points if p.over_budget]
        axis.scatter(
            [p.mean / 1e3 for p in over],
            [p.cost[FIVE_MINUTES.name] / 1e6 for p in over],
            marker="x",
            color="black",
            s=60,
            zorder=3,
            label="sends requests over the budget",
        )
        axis.set_title(titles[key])
        axis.set_xlabel("mean request (thousand tokens kept)")
        axis.set_ylabel(f"input cost, {FIVE_MINUTES.name} (M uncached tokens)")
        axis.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path, dpi=110, metadata=png_metadata(COMMAND))
    plt.close(figure)


def rhythm_text() -> str:
    return (
        f"A request every {GAP_SECONDS:.0f} s; after every {PAUSE_EVERY}th request a pause of "
        f"{PAUSE_SECONDS / 60:.0f} minutes (the 5-minute cache goes cold, the 1-hour one stays). Cache: the "
        f"emulator's model of Anthropic's rules (emulator/prompt_cache.py, fed by bench/cache_model.py): entries "
        f"only at breakpoints (the last message, and where the policy's stable prefix ends: before the oldest "
        f"result sent whole for every policy but the cache-economic one, which says where), 20-block lookback, "
        f"1,024-token minimum; read {FIVE_MINUTES.read:g}×, write {FIVE_MINUTES.write:g}× (5 min) or "
        f"{ONE_HOUR.write:g}× (1 h), the rest 1×. "
        f"Costs in millions of uncached-token equivalents; ÷ uncached divides "
        f"by the tokens the same requests would cost without a cache. Reuse when clearing: tokens of the leading "
        f"messages equal to the previous request's ÷ tokens sent, over calls whose stored history exceeds the "
        f"budget."
    )


def report(
    scale: float = 1.0, agent_rounds: int = 200, agent_budget: int = 200_000, out: Path | None = RESULTS
) -> tuple[str, dict[str, list[Point]], list[Goal]]:
    chosen = workloads(scale, agent_rounds, agent_budget)
    results: dict[str, list[Point]] = {}
    sections = [f"# Cost frontier\n\n{header(COMMAND)}\n\n{rhythm_text()}\n"]
    for workload in chosen:
        started = time.perf_counter()
        results[workload.key] = run_workload(workload)
        note = ""
        if workload.key == "agent":
            sizes = describe(workload.build())
            note = (
                f"Results: {sizes.results} in {sizes.rounds} rounds ({sizes.calls_per_round:.2f} calls a round), "
                f"{sizes.under_1k:.0%} under 1,000 tokens, {sizes.from_10k_to_60k:.0%} of 10,000-60,000, median "
                f"{sizes.median:,.0f}, largest {sizes.largest:,} (bench/agent_workload.py says how they are made).\n\n"
            )
        sections.append(
            f"## {workload.title}, budget {workload.budget:,}\n\n{note}{points_table(results[workload.key])}\n\n"
            f"({time.perf_counter() - started:.0f} s)\n"
        )
        print(f"{workload.key}: {time.perf_counter() - started:.0f} s", file=sys.stderr)
    budgets = {w.key: w.budget for w in chosen}
    made = [
        *goals(results, budgets, ECONOMIC_FAMILY),
        *goals(results, budgets, DEFAULT_FAMILY)[: len(results) * len(PRICINGS)],
    ]
    verdict = [no_worse_than_four(points) for points in results.values()]
    sections.append(
        "## Goals of issue 10 (cache-economic policy; then today's default, batches of four)\n\n"
        + render_goals(made, "verdict first")
        + "\n"
    )
    sections.append(
        "## Is cache-economic no worse than batches of four everywhere (the condition for the default)?\n\n"
        + render_goals(verdict, "verdict first")
        + "\n"
    )
    text = "\n".join(sections)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / "cost_frontier.md").write_text(text, encoding="utf-8")
        plot(results, {w.key: f"{w.title}, budget {w.budget:,}" for w in chosen}, out / "cost_frontier.png")
    return text, results, [*made, *verdict]


def main() -> None:
    started = time.perf_counter()
    text, _, _ = report()
    print(text)
    print(f"\n(whole benchmark: {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
