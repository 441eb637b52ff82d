"""The models Plimsoll knows: provider, hard context limit, default per-request budget, estimate profile."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import UTC, date, datetime
from typing import Any, Literal

from plimsoll import PROFILES

Provider = Literal["anthropic", "openai"]
MIN_BUDGET = 1_000  # the smallest budget a job may have
EMULATOR = "emulator"  # a model's base_url that means the bundled emulator


@dataclass(frozen=True)
class ModelSpec:
    name: str
    provider: Provider
    context_limit: int  # input + output tokens the model accepts in one request
    default_budget: int  # input tokens per request Plimsoll plans for
    profile: str  # the estimate profile of the model's tokenizer
    max_output_tokens: int
    retires: date | None = None  # deprecated: the day the provider stops serving it (as the SDK says it)
    replacement: str | None = None  # the current model to use instead, once it is deprecated or retired
    # The model's tokenizer, a file in the exact-count folder (PLIMSOLL_EXACT_COUNT_DIR): a tiktoken rank file or
    # a Hugging Face tokenizer.json (an open model served over the OpenAI wire). None: the profile's own, where
    # it has a public one (models/counting.py).
    tokenizer: str | None = None
    # False keeps the estimate even where the tokenizer is at hand: the bundled emulator's models, which stand in
    # for a provider whose tokenizer is private, so that jobs on them exercise the estimate and the calibrator.
    exact_counts: bool = True
    # Where its requests go (models/endpoints.py): None, its provider's API as the settings give it; EMULATOR,
    # the bundled emulator (PLIMSOLL_EMULATOR_URL); or an address of its own (an open model's server).
    base_url: str | None = None

    @property
    def max_budget(self) -> int:
        """The largest input budget: the provider rejects input + max_tokens over the context limit."""
        return self.context_limit - self.max_output_tokens

    def __post_init__(self) -> None:
        if self.provider not in ("anthropic", "openai"):
            raise ValueError(f"model {self.name!r}: unknown provider {self.provider!r}")
        if self.profile not in PROFILES:
            raise ValueError(f"model {self.name!r}: unknown estimate profile {self.profile!r}")
        if not 0 < self.default_budget <= self.max_budget:
            raise ValueError(f"model {self.name!r}: the default budget must be within 1..{self.max_budget}")
        if (self.retires is None) != (self.replacement is None):
            raise ValueError(f"model {self.name!r}: a retirement date goes with a replacement")

    def retired(self, today: date | None = None) -> bool:
        """True from the day the provider stops serving the model."""
        return self.retires is not None and (today or datetime.now(UTC).date()) >= self.retires


EMULATED: tuple[tuple[str, Provider], ...] = (
    ("plimsoll-emulator", "anthropic"),
    ("plimsoll-emulator-openai", "openai"),
)


def _emulated(name: str, provider: Provider) -> ModelSpec:
    """A model of the bundled emulator, answered at PLIMSOLL_EMULATOR_URL and keeping its estimates."""
    return ModelSpec(name, provider, 1_000_000, 400_000, "cl100k", 16_000, exact_counts=False, base_url=EMULATOR)


CATALOGUE: dict[str, ModelSpec] = {
    spec.name: spec
    for spec in (
        # The bundled emulator, on both wire formats: counting with cl100k, the 1M limit of the write-up.
        *(_emulated(name, provider) for name, provider in EMULATED),
        # Anthropic's current models, as the installed SDK lists them. The limits here are a cautious fallback:
        # the worker learns the real ones from the Models API (worker/model_limits.py).
        ModelSpec("claude-opus-5-5", "anthropic", 200_000, 160_000, "claude", 16_000),
        ModelSpec("claude-sonnet-5-5", "anthropic", 200_000, 160_000, "claude", 16_000),
        ModelSpec("claude-haiku-5-5", "anthropic", 200_000, 160_000, "claude", 16_000),
        ModelSpec("claude-opus-4-8", "anthropic", 200_000, 160_000, "claude", 16_000),
        ModelSpec("claude-sonnet-4-6", "anthropic", 200_000, 160_000, "claude", 16_000),
        ModelSpec("claude-haiku-4-5", "anthropic", 200_000, 160_000, "claude", 16_000),
        # Deprecated: served until the day given, then retired: refused for new jobs, readable for old ones.
        # A model the installed SDK no longer lists is retired (tests/test_model_knowledge.py keeps this true).
        ModelSpec(
            "claude-opus-4-5", "anthropic", 200_000, 160_000, "claude", 16_000, date(2027, 1, 22), "claude-opus-4-8"
        ),
        ModelSpec(
            "claude-sonnet-4-5",
            "anthropic",
            200_000,
            160_000,
            "claude",
            16_000,
            date(2026, 11, 30),
            "claude-sonnet-4-6",
        ),
        # OpenAI's current models, as the installed SDK lists them. Its Models API gives no limits, so these
        # are a cautious floor (every current model takes at least this); PLIMSOLL_MODELS raises them.
        ModelSpec("gpt-5.5", "openai", 128_000, 100_000, "o200k", 16_384),
        ModelSpec("gpt-5.4-mini", "openai", 128_000, 100_000, "o200k", 16_384),
        ModelSpec("gpt-4.1", "openai", 1_047_576, 400_000, "o200k", 16_384),
        ModelSpec("gpt-4o", "openai", 128_000, 100_000, "o200k", 16_384),
    )
}


class UnknownModel(ValueError):
    pass


def model_spec(
    name: str, overrides: dict[str, dict[str, Any]] | None = None, *, learned: tuple[int, int] | None = None
) -> ModelSpec:
    """The catalogue entry for ``name``: the static entry, then the limits ``learned`` from the provider
    (context window, output limit), then any overrides from the settings (an override may also add a model:
    then it names every field)."""
    override = (overrides or {}).get(name)
    base = CATALOGUE.get(name)
    if base is None and override is None:
        raise UnknownModel(f"unknown model {name!r}; known: {', '.join(sorted({*CATALOGUE, *(overrides or {})}))}")
    if base is None:
        return ModelSpec(name=name, **(override or {}))
    if learned is not None and learned[0] - min(base.max_output_tokens, learned[1]) >= MIN_BUDGET:
        context_limit, max_output = learned
        max_output = min(base.max_output_tokens, max_output)
        default_budget = min(base.default_budget, context_limit - max_output)
        base = replace(base, context_limit=context_limit, max_output_tokens=max_output, default_budget=default_budget)
    return replace(base, **override) if override else base


def _day(day: date) -> str:
    return f"{day:%B} {day.day}, {day.year}"


def lifecycle_warning(spec: ModelSpec, today: date | None = None) -> str | None:
    """What a job on ``spec`` should be told about its model: deprecated (still served) or retired."""
    if spec.retires is None:
        return None
    if spec.retired(today):
        return f"{spec.name} was retired on {_day(spec.retires)}: the provider no longer serves it."
    return (
        f"{spec.name} is deprecated: the provider stops serving it on {_day(spec.retires)}. "
        f"Choose a current model, e.g. {spec.replacement}."
    )


def retired_refusal(spec: ModelSpec, today: date | None = None) -> str | None:
    """Why a new job may not run on ``spec``, naming the model to use instead; None while it is served."""
    if spec.retires is None or not spec.retired(today):
        return None
    return (
        f"{spec.name} was retired on {_day(spec.retires)}: the provider no longer serves it. "
        f"Use {spec.replacement} instead (or set allow_retired_model, --allow-retired-model, to try it anyway)."
    )
