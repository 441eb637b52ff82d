"""How fast and how cache-friendly request fitting is: ``python -m bench.fitting``.

(a) Time to fit one request vs history length (11 to 10,001 messages), Plimsoll beside LangChain's
    ``ClearToolUsesEdit`` and ``trim_messages`` at the same budget, measured side by side in one run.
(b) A simulated subagent run: one instruction, then one tool round per call, each result a long chapter. For each
    strategy (``bench/strategies``) every request is computed, then: requests over the budget, mean request
    size, how much of each request repeats the previous one (the prefix a provider's cache can serve) and the
    input cost under Anthropic's 5-minute cache prices. The goals are printed with the table, met or not.
"""

from __future__ import annotations

import gc
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from copy import deepcopy
from dataclasses import dataclass
from itertools import pairwise
from statistics import fmean
from typing import Any, TypeVar

from langchain.agents.middleware.context_editing import ClearToolUsesEdit
from langchain_core.messages import trim_messages
from langchain_core.messages.utils import count_tokens_approximately

from bench.goals import Goal, render_goals
from bench.report import table
from bench.strategies import (
    PROFILE,
    ClearOneAtATime,
    KeepNewestResults,
    LegacyCutAtUserTurns,
    PlimsollFit,
    Strategy,
)
from bench.strategies.langchain_edit import DEFAULT_TRIGGER, LangChainClearToolUses, to_langchain
from demo.chapters import CORPUS_FILES, chapters, generated_text, shared_corpus
from estimate_fit.reference import Counter, reference_counters
from models.prices import FIVE_MINUTES
from plimsoll import estimate_message, estimate_tokens, fit, get_profile
from plimsoll.fitting import BATCH, plan_history
from plimsoll.history import from_messages
from plimsoll.messages import BLOCK_OVERHEAD, MESSAGE_OVERHEAD, Message

T = TypeVar("T")

FULL_BUDGET = 400_000
REUSE_FACTOR_GOAL = 3.0  # Plimsoll's prefix reuse must be at least this many times clear-one-at-a-time's
FIT_GOAL_MS = 10.0  # the design's figure for fit with estimates over 10,000 messages
REAL_COUNTERS = ("cl100k", "claude-legacy")

# (a): results of English prose, so LangChain's characters / 4 and our estimate count about the same.
TIMING_ROUNDS = (5, 50, 500, 5_000)
TIMING_RESULT_CHARS = 2_000
TIMING_REPEAT = 7


# --- histories ------------------------------------------------------------------------------------------------


def instruction(rounds: int) -> dict[str, Any]:
    return {"role": "user", "content": f"Read the {rounds} chapters one by one and note what happens in each."}


def tool_round(index: int, text: str) -> list[dict[str, Any]]:
    tool_use_id = f"toolu_{index:05d}"
    call = {"type": "tool_use", "id": tool_use_id, "name": "read_chapter", "input": {"chapter": index}}
    return [
        {"role": "assistant", "content": [call]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": tool_use_id, "content": text}]},
    ]


def subagent_history(results: Sequence[str]) -> list[dict[str, Any]]:
    """One instruction, then one tool round per result: a subagent's whole run as stored."""
    history = [instruction(len(results))]
    for index, text in enumerate(results, start=1):
        history += tool_round(index, text)
    return history


# --- (a) time to fit one request ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    messages: int
    budget: int
    fit_estimated: float  # ms, fit with estimates given
    fit_unestimated: float  # ms, fit estimating every message
    plan: float  # ms, plan_history on a History built beforehand
    clear_edit: float  # ms, ClearToolUsesEdit.apply on LangChain messages
    middleware: float  # ms, what ContextEditingMiddleware does per call: deepcopy, then apply
    trim: float  # ms, trim_messages


def best_ms(run: Callable[[T], object], prepare: Callable[[], T], repeat: int) -> float:
    """The best of ``repeat`` timings of ``run(prepare())``, the collector paused as ``timeit`` does."""
    best = math.inf
    for _ in range(repeat):
        argument = prepare()
        gc.disable()
        try:
            started = time.perf_counter()
            run(argument)
            best = min(best, time.perf_counter() - started)
        finally:
            gc.enable()
    return best * 1000


def timing_history(rounds: int) -> list[dict[str, Any]]:
    pool = [generated_text("en", TIMING_RESULT_CHARS, seed) for seed in range(16)]
    return subagent_history([pool[i % len(pool)] for i in range(rounds)])


def time_one_length(rounds: int, repeat: int) -> Timing:
    """Every fitter on the same history at the same budget: half of what the whole history needs, so each one
    has to act."""
    history = timing_history(rounds)
    estimates = [estimate_message(m, PROFILE) for m in history]
    budget = sum(estimates) // 2
    profile = get_profile(PROFILE)
    prebuilt = from_messages(history, estimates, profile)
    chain = to_langchain(history)
    edit = ClearToolUsesEdit(trigger=budget)

    def nothing() -> None:
        return None

    def clear_edit(messages: list[Any]) -> None:
        edit.apply(messages, count_tokens=count_tokens_approximately)

    def middleware(_: None) -> None:
        edit.apply(deepcopy(chain), count_tokens=count_tokens_approximately)

    def trim(_: None) -> None:
        trim_messages(chain, max_tokens=budget, token_counter=count_tokens_approximately, strategy="last")

    return Timing(
        messages=len(history),
        budget=budget,
        fit_estimated=best_ms(lambda _: fit(history, budget, estimates=estimates), nothing, repeat),
        fit_unestimated=best_ms(lambda _: fit(history, budget), nothing, repeat),
        plan=best_ms(lambda _: plan_history(prebuilt, budget, profile=profile), nothing, repeat),
        clear_edit=best_ms(clear_edit, lambda: list(chain), repeat),
        middleware=best_ms(middleware, nothing, repeat),
        trim=best_ms(trim, nothing, repeat),
    )


def timing_table(timings: Sequence[Timing]) -> str:
    header = [
        "messages",
        "budget",
        "fit, estimates given (ms)",
        "fit, no estimates (ms)",
        "plan_history, prebuilt History (ms)",
        "ClearToolUsesEdit.apply (ms)",
        "middleware: deepcopy + apply (ms)",
        "trim_messages (ms)",
        "apply ÷ fit (estimates)",
        "middleware ÷ fit (estimates)",
        "trim_messages ÷ fit (estimates)",
    ]
    rows = [
        [
            f"{t.messages:,}",
            f"{t.budget:,}",
            *(f"{ms:.3f}" for ms in (t.fit_estimated, t.fit_unestimated, t.plan, t.clear_edit, t.middleware, t.trim)),
            *(f"{ms / t.fit_estimated:.1f}×" for ms in (t.clear_edit, t.middleware, t.trim)),
        ]
        for t in timings
    ]
    return table(header, rows)


# --- (b) a simulated subagent run ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Scenario:
    title: str
    rounds: int
    result_tokens: int  # target claude-profile estimate of each result
    budget: int
    language: str = "ru"

    @property
    def scale(self) -> float:
        """Against the full run's budget: LangChain's default trigger is scaled by it in smaller runs."""
        return self.budget / FULL_BUDGET


MAIN = Scenario("40 chapters of ~44,000 tokens", rounds=40, result_tokens=44_000, budget=FULL_BUDGET)
SMALL_RESULTS = Scenario("200 results of ~4,400 tokens", rounds=200, result_tokens=4_400, budget=FULL_BUDGET)


def strategies_for(scenario: Scenario) -> dict[str, Strategy]:
    budget = scenario.budget
    return {
        "plimsoll": PlimsollFit(budget),
        "adaptive": PlimsollFit(budget, batching="adaptive"),
        "clear_one": ClearOneAtATime(budget),
        "keep_six": KeepNewestResults(budget),
        "langchain": LangChainClearToolUses(trigger=round(DEFAULT_TRIGGER * scenario.scale)),
        "legacy": LegacyCutAtUserTurns(budget),
    }


def chapter_texts(scenario: Scenario) -> list[str]:
    """Chapters sized so that the claude profile estimates each at about ``result_tokens``."""
    language = (scenario.language,)
    sample = chapters(1, chars=2 * scenario.result_tokens, languages=language)[0].text
    chars = round(scenario.result_tokens * len(sample) / estimate_tokens(sample, PROFILE))
    return [c.text for c in chapters(scenario.rounds, chars=chars, languages=language)]


def chapter_source(language: str) -> str:
    folder = shared_corpus()
    if folder is not None and (folder / CORPUS_FILES[language]).is_file():
        return f"the shared corpus ({CORPUS_FILES[language]})"
    return "generated text (../shared/corpus absent)"


class Estimates:
    """Claude-profile estimates of messages, each message object estimated once."""

    def __init__(self, history: Sequence[Message], estimates: Sequence[int]) -> None:
        self._known: dict[int, tuple[Message, int]] = {id(m): (m, e) for m, e in zip(history, estimates, strict=True)}

    def of(self, message: Message) -> int:
        known = self._known.get(id(message))
        if known is not None and known[0] is message:
            return known[1]
        tokens = estimate_message(message, PROFILE)
        self._known[id(message)] = (message, tokens)  # holding the message keeps its id from being reused
        return tokens


class RealCount:
    """A real tokenizer's count of a request: each distinct text counted once, framing as the profile counts it."""

    def __init__(self, count: Counter) -> None:
        self._count = count
        self._texts: dict[str, int] = {}

    def text(self, text: str) -> int:
        if text not in self._texts:
            self._texts[text] = self._count(text)
        return self._texts[text]

    def message(self, message: Message) -> int:
        content = message["content"]
        if isinstance(content, str):
            return MESSAGE_OVERHEAD + BLOCK_OVERHEAD + self.text(content)
        return MESSAGE_OVERHEAD + sum(BLOCK_OVERHEAD + self.text(_block_text(b)) for b in content)

    def request(self, messages: Sequence[Message]) -> int:
        return sum(self.message(m) for m in messages)


def _block_text(block: Mapping[str, Any]) -> str:
    kind = block["type"]
    if kind == "text":
        return str(block["text"])
    if kind == "tool_use":
        return str(block["name"]) + json.dumps(block["input"], ensure_ascii=False)
    if kind == "tool_result":
        content = block["content"]
        return content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
    return json.dumps(block, ensure_ascii=False)


@dataclass(frozen=True)
class Sent:
    """One request of a run."""

    tokens: int  # by the claude profile
    reused: int  # tokens of the longest common prefix with the previous request
    rewrote: bool  # something the previous request sent has changed: the cached prefix is cut short
    newest_whole: bool  # the newest tool result is sent as stored
    real: dict[str, int]  # by each real tokenizer


def common_prefix(previous: Sequence[Message], current: Sequence[Message]) -> int:
    """How many leading messages the two requests share (a provider caches a prefix, not a subset)."""
    shared = 0
    for before, now in zip(previous, current, strict=False):
        if before != now:
            break
        shared += 1
    return shared


def simulate(
    strategy: Strategy, history: Sequence[Message], estimates: Sequence[int], counters: Mapping[str, RealCount]
) -> list[Sent]:
    """One request per call, the history growing by one tool round per call."""
    known = Estimates(history, estimates)
    run: list[Sent] = []
    previous: Sequence[Message] = ()
    for end in range(3, len(history) + 1, 2):
        request = strategy.request(history[:end], estimates[:end]).messages
        tokens = [known.of(m) for m in request]
        shared = common_prefix(previous, request)
        run.append(
            Sent(
                tokens=sum(tokens),
                reused=sum(tokens[:shared]),
                rewrote=shared < len(previous),
                newest_whole=request[-1] == history[end - 1],
                real={name: count.request(request) for name, count in counters.items()},
            )
        )
        previous = request
    return run


@dataclass(frozen=True)
class Summary:
    name: str
    requests: int
    over_budget: int  # by the claude profile
    over_budget_real: dict[str, int]  # by each real tokenizer
    mean_tokens: float
    largest: int
    reuse: float  # tokens reused from the previous request ÷ tokens sent, over the whole run
    mean_reuse: float  # the same share per request, averaged
    rewrites: int  # requests that change something the previous one sent
    fewest_between_rewrites: int | None  # calls between the two closest rewrites (None: fewer than two)
    newest_always_whole: bool
    cost: float  # input cost in uncached-token equivalents, the cache holding the previous request
    sent: int  # tokens sent over the run: the cost without a cache

    @property
    def cost_ratio(self) -> float:
        return self.cost / self.sent


def cached_cost(run: Sequence[Sent]) -> float:
    """The first request is all written to the cache; each next one reads the prefix it shares with the one
    before and writes the rest."""
    return sum(FIVE_MINUTES.cost(uncached=0, written=s.tokens - s.reused, read=s.reused) for s in run)


def fewest_between(calls: Sequence[int]) -> int | None:
    return min((b - a for a, b in pairwise(calls)), default=None)


def summarize(name: str, run: Sequence[Sent], budget: int) -> Summary:
    sent = sum(s.tokens for s in run)
    rewrites = [call for call, s in enumerate(run) if s.rewrote]
    return Summary(
        name=name,
        requests=len(run),
        over_budget=sum(s.tokens > budget for s in run),
        over_budget_real={counter: sum(s.real[counter] > budget for s in run) for counter in run[0].real},
        mean_tokens=fmean(s.tokens for s in run),
        largest=max(s.tokens for s in run),
        reuse=sum(s.reused for s in run) / sent,
        mean_reuse=fmean(s.reused / s.tokens for s in run),
        rewrites=len(rewrites),
        fewest_between_rewrites=fewest_between(rewrites),
        newest_always_whole=all(s.newest_whole for s in run),
        cost=cached_cost(run),
        sent=sent,
    )


def real_counters(names: Sequence[str] = REAL_COUNTERS) -> dict[str, RealCount]:
    available = reference_counters()
    return {name: RealCount(available[name]) for name in names if name in available}


def run_strategies(
    scenario: Scenario, history: Sequence[Message], counter_names: Sequence[str] = REAL_COUNTERS
) -> dict[str, Summary]:
    """Every strategy over the same run, summarized, keyed as in :func:`strategies_for`."""
    estimates = [estimate_message(m, PROFILE) for m in history]
    counters = real_counters(counter_names)
    return {
        key: summarize(strategy.name, simulate(strategy, history, estimates, counters), scenario.budget)
        for key, strategy in strategies_for(scenario).items()
    }


def run_scenario(scenario: Scenario, counter_names: Sequence[str] = REAL_COUNTERS) -> dict[str, Summary]:
    return run_strategies(scenario, subagent_history(chapter_texts(scenario)), counter_names)


def run_table(summaries: Mapping[str, Summary]) -> str:
    real = list(next(iter(summaries.values())).over_budget_real)
    header = [
        "strategy",
        "over budget (estimate)",
        *(f"over budget ({name})" for name in real),
        "mean request",
        "largest request",
        "prefix reuse",
        "mean reuse per request",
        "prefix rewrites",
        "fewest calls between rewrites",
        "newest result whole",
        "cost ÷ uncached",
        "cost (M uncached tokens)",
    ]
    rows = [
        [
            s.name,
            s.over_budget,
            *(s.over_budget_real[name] for name in real),
            f"{s.mean_tokens:,.0f}",
            f"{s.largest:,}",
            f"{s.reuse:.1%}",
            f"{s.mean_reuse:.1%}",
            s.rewrites,
            "—" if s.fewest_between_rewrites is None else s.fewest_between_rewrites,
            "yes" if s.newest_always_whole else "no",
            f"{s.cost_ratio:.3f}",
            f"{s.cost / 1e6:.2f}",
        ]
        for s in summaries.values()
    ]
    return table(header, rows)


# --- goals --------------------------------------------------------------------------------------------------


def never_over_budget(summary: Summary) -> bool:
    return summary.over_budget == 0 and not any(summary.over_budget_real.values())


def run_goals(summaries: Mapping[str, Summary]) -> list[Goal]:
    plimsoll, clear_one, langchain = summaries["plimsoll"], summaries["clear_one"], summaries["langchain"]
    checked = ", ".join(["the profile's estimate", *plimsoll.over_budget_real])
    factor = plimsoll.reuse / clear_one.reuse if clear_one.reuse else math.inf
    return [
        Goal(f"Plimsoll sends no request over the budget (by {checked})", never_over_budget(plimsoll)),
        Goal(
            f"Plimsoll's prefix reuse ({plimsoll.reuse:.1%}) is at least {REUSE_FACTOR_GOAL:.0f}× "
            f"clear-one-at-a-time's ({clear_one.reuse:.1%}): {factor:.2f}×",
            factor >= REUSE_FACTOR_GOAL,
        ),
        Goal(
            f"Plimsoll's prefix reuse ({plimsoll.reuse:.1%}) is above ClearToolUsesEdit's ({langchain.reuse:.1%})",
            plimsoll.reuse > langchain.reuse,
        ),
        Goal("Plimsoll sends the newest result whole in every request", plimsoll.newest_always_whole),
    ]


def rewrites_every_batch_at_most(summary: Summary) -> Goal:
    """The design's cache promise: under stage 1 the prefix is rewritten at most once every four calls."""
    fewest = summary.fewest_between_rewrites
    return Goal(
        f"{summary.name} rewrites the prefix at most once every {BATCH} calls "
        f"(fewest calls between rewrites: {'—' if fewest is None else fewest})",
        fewest is None or fewest >= BATCH,
    )


def adaptive_goals(summaries: Mapping[str, Summary]) -> list[Goal]:
    four, adaptive = summaries["plimsoll"], summaries["adaptive"]
    change = adaptive.cost / four.cost - 1
    steadier = adaptive.rewrites <= four.rewrites and (adaptive.fewest_between_rewrites or math.inf) >= (
        four.fewest_between_rewrites or math.inf
    )
    return [
        Goal(
            f"adaptive costs less than batches of four: {adaptive.cost / 1e6:.2f} M vs {four.cost / 1e6:.2f} M "
            f"({change:+.1%})",
            adaptive.cost < four.cost,
        ),
        Goal("adaptive sends no request over the budget", never_over_budget(adaptive)),
        Goal("adaptive sends the newest result whole in every request", adaptive.newest_always_whole),
        Goal(
            f"adaptive rewrites the prefix no more often than batches of four ({adaptive.rewrites} rewrites vs "
            f"{four.rewrites})",
            steadier,
        ),
        rewrites_every_batch_at_most(adaptive),
    ]


# --- output -------------------------------------------------------------------------------------------------


def print_timings(rounds: Sequence[int] = TIMING_ROUNDS, repeat: int = TIMING_REPEAT) -> None:
    print("## (a) Time to fit one request vs history length\n")
    print(
        f"An instruction, then tool rounds with results of {TIMING_RESULT_CHARS:,} characters of English prose; "
        f"the budget is half of what the whole history needs (claude profile), the same for every fitter "
        f"(ClearToolUsesEdit: trigger = budget, keep 3; trim_messages: strategy 'last'; both counting with "
        f"count_tokens_approximately on LangChain messages built beforehand). Best of {repeat} runs.\n"
    )
    timings = [time_one_length(r, repeat) for r in rounds]
    print(timing_table(timings))
    longest = timings[-1]
    goal = Goal(
        f"fit with estimates given over {longest.messages:,} messages takes {longest.fit_estimated:.2f} ms "
        f"(the design's figure: under {FIT_GOAL_MS:.0f} ms)",
        longest.fit_estimated < FIT_GOAL_MS,
    )
    print(f"\n{render_goals([goal], 'verdict first')}\n")


def print_run(scenario: Scenario, *, goals: bool) -> None:
    texts = chapter_texts(scenario)
    mean_result = fmean(estimate_tokens(t, PROFILE) for t in texts)
    print(f"## (b) A simulated subagent run: {scenario.title}\n")
    print(
        f"One instruction, then {scenario.rounds} tool rounds, one per call; each result a chapter of "
        f"{scenario.language!r} text from {chapter_source(scenario.language)}, sized to ~"
        f"{scenario.result_tokens:,} tokens by the claude profile (mean {mean_result:,.0f}); budget "
        f"{scenario.budget:,}; no system prompt. Requests counted by the claude profile; real counts (every "
        f"request, each distinct text counted once, message framing as the profile counts it) where the tokenizer "
        f"is available. Prefix reuse: tokens of the leading messages equal to the previous request's ÷ tokens "
        f"sent, over the run. Cost: cache write {FIVE_MINUTES.write:g}×, read {FIVE_MINUTES.read:g}×, the cache "
        f"holding the previous request (first: all written); ÷ uncached compares with the same requests sent "
        f"without a cache. "
        f"The legacy requests over the budget would be rejected, so its cost is hypothetical.\n"
    )
    summaries = run_strategies(scenario, subagent_history(texts))
    print(run_table(summaries))
    if goals:
        print("\n### Goals\n")
        print(render_goals(run_goals(summaries), "verdict first"))
    print("\n### The design's cache promise\n")
    print(render_goals([rewrites_every_batch_at_most(summaries["plimsoll"])], "verdict first"))
    print("\n### Adaptive batches against batches of four\n")
    print(render_goals(adaptive_goals(summaries), "verdict first"))
    print()


def main() -> None:
    print_timings()
    print_run(MAIN, goals=True)
    print_run(SMALL_RESULTS, goals=False)


if __name__ == "__main__":
    main()
