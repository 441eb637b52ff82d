"""``bench.cost_frontier`` scaled down (a tenth of the chapters and budgets, a 60-round agent run): its invariants,
and goals that follow the figures rather than being written in."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytest.importorskip("langchain")
pytest.importorskip("matplotlib")

from bench.cache_model import LOOKBACK, MIN_TOKENS, AnthropicCache
from bench.cost_frontier import (  # after the skips: langchain and matplotlib are bench extras
    DEFAULT_FAMILY,
    ECONOMIC_FAMILY,
    PAUSED_1H,
    PAUSED_5M,
    PRICINGS,
    Point,
    Stored,
    dominance,
    gap_before,
    no_worse_than_four,
    plan_run,
    ratio_goal,
    report,
    workloads,
)
from bench.frontier_policies import sweep
from bench.goals import Goal
from emulator.counting import Unit
from emulator.prompt_cache import AnthropicPromptCache
from models.prices import ONE_HOUR

PLIMSOLL = ("Plimsoll", "cache-economic")


Frontier = tuple[str, dict[str, list[Point]], list[Goal], Path]


# One xdist worker for the module, and the frontier (about 40 s) kept for the session: computed once, even where
# the worker runs other modules' tests between this one's (a module fixture was computed twice in CI).
pytestmark = [pytest.mark.bench, pytest.mark.xdist_group("cost_frontier")]


@pytest.fixture(scope="session")
def frontier(tmp_path_factory: pytest.TempPathFactory) -> Frontier:
    out = tmp_path_factory.mktemp("results")
    text, results, goals = report(scale=0.1, agent_rounds=60, agent_budget=150_000, out=out)
    return text, results, goals, out


def test_plimsoll_never_sends_a_request_over_its_budget_and_keeps_the_newest_round(frontier: Frontier) -> None:
    _, results, _, _ = frontier
    for points in results.values():
        ours = [p for p in points if p.family.startswith(PLIMSOLL)]
        assert len(ours) >= 8
        for point in ours:
            assert point.over_budget == 0, point
            assert point.unsendable == 0, point
            assert point.newest_round_whole, point
            assert point.requests > 0 and point.largest <= point.budget


def test_every_point_is_priced_under_every_market_and_the_peers_are_there(frontier: Frontier) -> None:
    _, results, _, _ = frontier
    for points in results.values():
        families = {p.family for p in points}
        assert {
            DEFAULT_FAMILY,
            ECONOMIC_FAMILY,
            "clear one at a time",
            "keep the newest N",
            "ClearToolUsesEdit",
        } <= families
        for point in points:
            assert set(point.cost) == {m.name for m in PRICINGS}
            for market in PRICINGS:
                assert 0 < point.ratio(market.name) < 2.5
    for key in ("chapters", "small"):  # a subagent's single user turn leaves legacy nothing to cut
        assert next(p for p in results[key] if p.family.startswith("legacy")).over_budget > 0


def test_the_report_marks_every_goal_and_writes_the_table_and_the_plot(frontier: Frontier) -> None:
    text, results, goals, out = frontier
    assert len(goals) >= 3 * len(PRICINGS) + 5
    lines = [line for line in text.splitlines() if line.startswith(("- met:", "- NOT MET:"))]
    assert len(lines) == len(goals)
    assert (out / "cost_frontier.md").read_text(encoding="utf-8") == text
    assert (out / "cost_frontier.png").stat().st_size > 10_000
    for key in results:
        assert any(line.split(":", 2)[1].strip().startswith(key) for line in lines)


def test_goals_follow_the_figures(frontier: Frontier) -> None:
    _, results, _, _ = frontier
    points = results["chapters"]
    pricing = PAUSED_5M.name
    budget = max(p.budget for p in points if p.family == DEFAULT_FAMILY)
    goal = ratio_goal(points, ECONOMIC_FAMILY, budget, pricing, below=0.10, at_most=None, context=0.05)
    ours = next(p for p in points if p.family == ECONOMIC_FAMILY and p.budget == budget)
    four = next(p for p in points if p.family == DEFAULT_FAMILY and p.budget == budget)
    expected = ours.ratio(pricing) <= 0.9 * four.ratio(pricing) and ours.mean >= 0.95 * four.mean
    assert goal.met == expected

    def scaled(point: Point, factor: float) -> Point:
        return dataclasses.replace(point, cost={k: v * factor for k, v in point.cost.items()})

    cheap = [scaled(p, 0.01) if p.family == ECONOMIC_FAMILY else p for p in points]
    dear = [scaled(p, 100.0) if p.family == ECONOMIC_FAMILY else p for p in points]
    assert not dominance(dear, ECONOMIC_FAMILY, pricing).met
    assert dominance(cheap, ECONOMIC_FAMILY, pricing).met
    assert no_worse_than_four(cheap).met
    assert not no_worse_than_four(dear).met


@pytest.mark.parametrize("family", [DEFAULT_FAMILY, ECONOMIC_FAMILY])
def test_the_cache_model_reads_and_writes_what_the_emulators_cache_does(family: str) -> None:
    """The benchmark prices with the emulator's cache (bench.cache_model feeds it messages as token counts and
    blocks): on the emulator's own units, one per message, it reads and writes the same, request by request."""
    workload = workloads(scale=0.1)[0]
    stored = Stored(workload.build())
    policy = next(p for p in sweep(workload.budget, (1.0,)) if p.family == family)
    calls, _ = plan_run(policy, stored, PAUSED_1H)
    ours, theirs = AnthropicCache(ONE_HOUR), AnthropicPromptCache()
    now, rewrites = 0.0, 0
    for call, sent in enumerate(calls):
        now += gap_before(call)
        marks = sorted({*sent.marks, len(sent.keys) - 1})
        usage = ours.send(sent.keys, sent.tokens, sent.blocks, marks, now)
        units = [
            Unit(str(key).encode(), tuple(range(tokens)), {"type": "ephemeral"} if i in marks else None)
            for i, (key, tokens) in enumerate(zip(sent.keys, sent.tokens, strict=True))
        ]
        got = theirs.apply(model="m", units=units, now=now, ttl_seconds=3600, min_tokens=MIN_TOKENS, lookback=LOOKBACK)
        assert (usage.read, usage.written) == (got.read, got.written), call
        rewrites += usage.written > sum(sent.tokens) // 2
    assert rewrites > 1  # the run clears, so the prefix does change
