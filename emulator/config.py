"""The emulator's settings, fixed at start and changeable at run time through the admin API, as pydantic models.

Strict as the admin API's JSON is: ``true`` is no number and ``"5"`` no int, but an int is a float and a list a
tuple. Every model is frozen; ``EmulatorConfig.updated`` makes the changed copy, validated again. A setting of the
wrong type, out of range or unknown is a ``ConfigError`` naming it (``faults.rate: Input should be ...``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, ClassVar, Literal, Self, get_args

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, ValidationError
from pydantic_core import ErrorDetails

# What a fault can be: an HTTP 429 with retry-after, Anthropic's 529 overloaded_error (503 on the OpenAI
# route), a 500 api_error, a connection dropped in the middle of the response, or a hang (nothing is sent for
# ``hang_seconds``, then the connection is dropped).
FaultKind = Literal["429", "529", "500", "drop", "hang"]
FAULT_KINDS: tuple[str, ...] = get_args(FaultKind)
# A scripted fault list may also say "none": that request is served normally.
NO_FAULT = "none"
ScriptedFault = Literal[FaultKind, "none"]


class ConfigError(ValueError):
    """A setting has the wrong type, is out of range or is unknown."""


def _list_as_tuple(value: object) -> object:
    """JSON has no tuples: a list given for a tuple setting is taken as one (strict mode would refuse it)."""
    return tuple(value) if isinstance(value, list) else value


Seconds = Annotated[float, Field(ge=0)]
PerMinute = Annotated[int, Field(ge=0, description="0: no limit")]


class _Settings(BaseModel):
    """A group of settings: frozen, strict, unknown names refused, and every failure a ConfigError."""

    model_config = ConfigDict(frozen=True, strict=True, extra="forbid", allow_inf_nan=False, validate_default=True)
    group: ClassVar[tuple[str, ...]] = ()
    """Where the group sits in ``EmulatorConfig``, so a problem found in the group alone names its full path."""

    def __init__(self, **values: Any) -> None:
        try:
            super().__init__(**values)
        except ValidationError as error:
            raise ConfigError(_first_problem(error, type(self))) from None

    # Pydantic's own mark for an ``__init__`` that only validates (``RootModel`` carries it too): nested groups
    # are then validated as part of the whole, so the first problem names its full path.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    @classmethod
    def _checked(cls, values: Mapping[str, Any]) -> Self:
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise ConfigError(_first_problem(error, cls)) from None


class FaultConfig(_Settings):
    """Which model requests fail, and how.

    ``script`` is served first, one entry per request ("the next 2 requests get 429" is ``("429", "429")``);
    after it runs out, each request fails with probability ``rate``, its kind drawn from ``kinds``. The draws
    come from a generator seeded with ``seed``, so the same requests see the same faults.
    """

    group = ("faults",)

    rate: Annotated[float, Field(ge=0, le=1)] = 0.0
    kinds: Annotated[tuple[FaultKind, ...], Field(min_length=1), BeforeValidator(_list_as_tuple)] = ("429",)
    script: Annotated[tuple[ScriptedFault, ...], BeforeValidator(_list_as_tuple)] = ()
    retry_after_seconds: Seconds = 1.0
    seed: int = 0
    hang_seconds: Seconds = 3600.0


class RateLimitConfig(_Settings):
    """Per API key and model class, what may be sent per minute (0: no limit); see emulator/rate_limits.py."""

    group = ("rate_limits",)

    requests_per_minute: PerMinute = 0
    input_tokens_per_minute: PerMinute = 0
    output_tokens_per_minute: PerMinute = 0
    count_cache_reads: bool = False
    """Whether cache reads count as input tokens (Anthropic's current models: no; other providers: yes)."""
    second_client_share: Annotated[float, Field(ge=0, lt=1)] = 0.0
    """The share of every limit another client of the same key takes in the background."""


class EmulatorConfig(_Settings):
    """Everything the emulator can be told. ``api_key=None`` accepts any key."""

    limit: Annotated[int, Field(ge=1)] = 1_000_000
    tokenizer: str = "cl100k"
    count_scale: Annotated[float, Field(ge=0.5, le=4.0)] = 1.0
    """Input tokens counted per tokenizer token: above 1, a model whose tokenizer counts more than the
    estimate profile expects (newer Claude tokenizers count up to 1.35x more for the same text)."""
    max_output_tokens: Annotated[int, Field(ge=1)] = 16_000
    """What the models endpoint reports as the model's ``max_tokens``."""
    min_cacheable_tokens: Annotated[int, Field(ge=0)] = 1024
    cache_ttl_seconds: Annotated[float, Field(gt=0)] = 300.0
    cache_lookback_blocks: Annotated[int, Field(ge=1)] = 20
    faults: FaultConfig = FaultConfig()
    rate_limits: RateLimitConfig = RateLimitConfig()
    latency_seconds: Seconds = 0.0
    anxious: bool = False
    delegate_group: Annotated[int, Field(ge=1)] = 10
    api_key: str | None = None
    stop_at_context_window: bool = False
    """When input + max_tokens pass the limit (input alone fitting), answer as newer Anthropic models do:
    write until the window is full and stop with ``model_context_window_exceeded``, instead of a 400."""

    def updated(self, changes: Mapping[str, Any]) -> EmulatorConfig:
        """A copy with ``changes`` applied, as sent to ``POST /v1/emulator/config``. ``faults`` and
        ``rate_limits`` may be given partially: the fields they leave out keep their values."""
        merged: dict[str, Any] = {**self.model_dump(), **changes}
        for group in ("faults", "rate_limits"):
            given = changes.get(group)
            if isinstance(given, Mapping):
                merged[group] = {**getattr(self, group).model_dump(), **given}
        return self._checked(merged)

    def as_dict(self) -> dict[str, Any]:
        return self.model_dump(mode="json")


def _first_problem(error: ValidationError, model: type[_Settings]) -> str:
    """The first thing wrong, naming the setting: ``faults.rate: Input should be less than or equal to 1``."""
    problem = error.errors(include_url=False)[0]
    where = [str(part) for part in problem["loc"]]
    path = [*model.group, *where]
    if problem["type"] == "extra_forbidden":
        *group, name = path
        return f"unknown {' '.join([*group, 'setting'])} {name!r}; known: {sorted(_fields(model, where[:-1]))}"
    return f"{'.'.join(path) or 'settings'}: {_message(problem)}"


def _message(problem: ErrorDetails) -> str:
    if problem["type"] == "model_type":  # not "... or instance of FaultConfig": the admin API speaks JSON
        return "Input should be a valid dictionary"
    if problem["type"] == "tuple_type":  # JSON has lists
        return f"Input should be a valid list, not {type(problem['input']).__name__}"
    if problem["type"] == "too_short":
        return problem["msg"].replace("Tuple should", "List should")
    if problem["type"].endswith("_type"):  # a wrong type: say which was given
        return f"{problem['msg']}, not {type(problem['input']).__name__}"
    return problem["msg"]


def _fields(model: type[BaseModel], group: list[str]) -> list[str]:
    for name in group:
        annotation = model.model_fields[name].annotation
        assert isinstance(annotation, type) and issubclass(annotation, BaseModel)
        model = annotation
    return list(model.model_fields)
