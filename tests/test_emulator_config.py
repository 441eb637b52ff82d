"""The emulator's settings: strict as the admin API's JSON is, partial updates of a group, and a ConfigError that
names the setting."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from emulator.config import ConfigError, EmulatorConfig, FaultConfig, RateLimitConfig


def test_a_group_given_in_part_keeps_the_rest() -> None:
    start = EmulatorConfig(faults=FaultConfig(rate=0.25, seed=7), limit=5000)
    changed = start.updated({"faults": {"script": ["429", "none"]}, "anxious": True})
    assert changed.faults == FaultConfig(rate=0.25, seed=7, script=("429", "none"))
    assert (changed.limit, changed.anxious, changed.rate_limits) == (5000, True, start.rate_limits)
    assert start.updated({}) == start
    assert EmulatorConfig().updated(EmulatorConfig(limit=5000).as_dict()) == EmulatorConfig(limit=5000)


def test_json_types_are_taken_as_the_settings_types() -> None:
    changed = EmulatorConfig().updated({"latency_seconds": 2, "faults": {"kinds": ["500", "drop"]}})
    assert isinstance(changed.latency_seconds, float)
    assert changed.faults.kinds == ("500", "drop")
    assert changed.as_dict()["faults"]["kinds"] == ["500", "drop"]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"limit": True}, "limit: Input should be a valid integer, not bool"),
        ({"limit": 2.0}, "limit: Input should be a valid integer, not float"),
        ({"latency_seconds": "1"}, "latency_seconds: Input should be a valid number, not str"),
        ({"anxious": 1}, "anxious: Input should be a valid boolean, not int"),
        ({"faults": {"kinds": "429"}}, "faults.kinds: Input should be a valid list, not str"),
        ({"faults": {"kinds": []}}, "faults.kinds: List should have at least 1 item after validation, not 0"),
        ({"faults": {"kinds": ["teapot"]}}, "faults.kinds.0: Input should be '429', '529', '500', 'drop' or 'hang'"),
        ({"faults": {"script": ["429", "oops"]}}, "faults.script.1: Input should be '429', "),
        ({"faults": 5}, "faults: Input should be a valid dictionary"),
        ({"count_scale": float("nan")}, "count_scale: Input should be a finite number"),
        ({"cache_ttl_seconds": 0}, "cache_ttl_seconds: Input should be greater than 0"),
        ({"rate_limits": {"second_client_share": 1}}, "rate_limits.second_client_share: Input should be less than 1"),
        ({"colour": "blue"}, "unknown setting 'colour'; known: ['anxious', "),
        ({"faults": {"speed": 1}}, "unknown faults setting 'speed'; known: ['hang_seconds', 'kinds', "),
    ],
)
def test_a_wrong_setting_is_a_config_error_naming_it(changes: dict[str, Any], message: str) -> None:
    start = EmulatorConfig()
    with pytest.raises(ConfigError) as refused:
        start.updated(changes)
    assert str(refused.value).startswith(message)


def test_settings_are_frozen_and_checked_when_made() -> None:
    with pytest.raises(ConfigError, match=r"^faults\.rate: Input should be less than or equal to 1$"):
        EmulatorConfig(faults={"rate": 2})  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"^limit: Input should be greater than or equal to 1$"):
        EmulatorConfig(limit=0)
    with pytest.raises(ConfigError, match=r"^rate_limits\.second_client_share: Input should be less than 1$"):
        RateLimitConfig(second_client_share=1.0)  # a group made alone names its place in the whole
    with pytest.raises(ConfigError, match=r"^unknown faults setting 'speed'"):
        FaultConfig(speed=1)  # type: ignore[call-arg]
    with pytest.raises(ValidationError, match="frozen"):
        EmulatorConfig().limit = 5  # type: ignore[misc]
