"""A job's options: what a caller may choose about how a job runs, besides its instruction and its documents.

Defined once, here. The API's request bodies extend this model (``JobIn``, ``ContinueIn``), the HTTP client and
the command line build it, ``create_job`` takes it, a subagent inherits its main job's (``JobOptions.of``) and a
continued job the old job's. Adding an option is adding a field here (and a column where the job keeps it), then
using it. The module imports only pydantic and the engine's locale check: the command line loads it to submit."""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from models.integers import MAX_INPUT_TOKENS, MAX_INT, MAX_STEPS, MIN_INPUT_TOKENS
from models.statuses import REPRODUCTIONS, Strategy
from plimsoll.notices import check_locale

if TYPE_CHECKING:
    from models.tables import Job


class JobOptions(BaseModel):
    """Every field may be left out: a new job takes the default named, a continued job the old job's value (but
    the strategy, which is Plimsoll's unless given), a subagent its main job's."""

    model_config = ConfigDict(extra="forbid")  # a misspelt option is an error, not silently ignored

    model: str | None = Field(default=None, description="a model of the catalogue; default from the settings")
    budget: int | None = Field(
        default=None,
        le=MAX_INT,
        description="input tokens per request; default: the model's, at most its limit less its reply",
    )
    locale: str | None = Field(
        default=None,
        max_length=16,
        pattern=r"^[A-Za-z]{2,3}([-_][A-Za-z0-9]{1,8})*$",
        examples=["en", "cs-CZ"],
        description="the language of the notices: en or cs, a region may follow; default from the settings",
    )
    strategy: str = Field(  # not a Strategy: an unknown one is create_job's to refuse, in its own words
        default=Strategy.PLIMSOLL,
        description=f"{Strategy.PLIMSOLL}, or {' / '.join(REPRODUCTIONS)} to reproduce old failures (where the "
        "operator allows reproductions)",
    )
    safety_net: bool = Field(
        default=True,
        description="tell the agent that old tool results are cleared (false: where the operator allows reproductions)",
    )
    compaction: str | None = Field(
        default=None, description="auto: summarize what stages 2-3 would drop; off: drop it (default: auto)"
    )
    max_steps: int | None = Field(
        default=None,
        ge=1,
        le=MAX_STEPS,
        description="stop the job after this many steps; default and most: the operator's (max_steps_per_job)",
    )
    max_input_tokens: int | None = Field(
        default=None,
        ge=MIN_INPUT_TOKENS,
        le=MAX_INPUT_TOKENS,
        description="stop the job before its requests add up to more input tokens; default and most: the "
        "operator's (max_input_tokens_per_job)",
    )
    max_cost_usd: Decimal | None = Field(
        default=None,
        gt=0,
        le=10**9,
        decimal_places=6,
        description="what the job and its subagents may spend together, in USD; default and most: the operator's "
        "(max_cost_usd_per_job)",
    )
    wind_down: bool = Field(
        default=True,
        description="tell the agent what is left when its budget nears its end (false: where the operator allows "
        "reproductions)",
    )
    allow_retired_model: bool = Field(
        default=False, description="run a new job on a retired model anyway (the provider may refuse it)"
    )

    KEPT: ClassVar[tuple[str, ...]] = (
        "model", "budget", "locale", "strategy", "safety_net", "compaction", "max_steps", "max_input_tokens",
        "max_cost_usd", "wind_down",
    )  # fmt: skip
    """The options a job keeps in its row, defaults filled in; ``allow_retired_model`` is asked at creation only."""

    @field_validator("locale")
    @classmethod
    def known_locale(cls, value: str | None) -> str | None:
        return None if value is None else check_locale(value)

    @classmethod
    def of(cls, job: Job) -> JobOptions:
        """The options a stored job runs with, each given (what a subagent inherits)."""
        return JobOptions(**{name: getattr(job, name) for name in cls.KEPT})

    def chosen(self) -> dict[str, Any]:
        """The options given, by name (a field left out or sent as null is not), whatever model extends these."""
        return self.model_dump(include=set(JobOptions.model_fields), exclude_unset=True, exclude_none=True)

    def options(self) -> JobOptions:
        """Just the options, of a model that extends them (a request body): the same ones given."""
        return JobOptions(**self.chosen())
