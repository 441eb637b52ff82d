"""The emulator's admin API wants the emulator's key when it has one; its Python client sends it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from emulator import EmulatorConfig, EmulatorServer

KEY = "admin-test-key"
ADMIN_ROUTES = [
    ("GET", "stats", None),
    ("GET", "billing", None),
    ("GET", "config", None),
    ("POST", "config", {"anxious": True}),
    ("POST", "reset", {}),
    ("POST", "clock", {"advance_seconds": 1}),
]


@pytest.fixture(scope="module")
def keyed_emulator() -> Iterator[EmulatorServer]:
    with EmulatorServer(EmulatorConfig(api_key=KEY)) as server:
        yield server


def admin_call(server: EmulatorServer, method: str, name: str, body: object, headers: dict[str, str]) -> int:
    url = f"{server.base_url}/v1/emulator/{name}"
    return httpx.request(method, url, json=body, headers=headers, timeout=10).status_code


@pytest.mark.parametrize(("method", "name", "body"), ADMIN_ROUTES)
def test_every_admin_route_refuses_a_missing_or_wrong_key(
    keyed_emulator: EmulatorServer, method: str, name: str, body: object
) -> None:
    before = keyed_emulator.configure()  # the client sends the key
    for headers in ({}, {"x-api-key": "wrong"}, {"authorization": "Bearer wrong"}, {"authorization": KEY}):
        assert admin_call(keyed_emulator, method, name, body, headers) == 401, headers
    assert keyed_emulator.configure() == before  # nothing was changed by the refused calls


@pytest.mark.parametrize(("method", "name", "body"), ADMIN_ROUTES)
def test_either_key_header_is_accepted(keyed_emulator: EmulatorServer, method: str, name: str, body: object) -> None:
    for headers in ({"x-api-key": KEY}, {"authorization": f"Bearer {KEY}"}):
        assert admin_call(keyed_emulator, method, name, body, headers) == 200, headers
    keyed_emulator.reset()


def test_the_client_follows_a_key_changed_at_run_time_and_back_on_reset(keyed_emulator: EmulatorServer) -> None:
    keyed_emulator.configure(api_key="rotated")
    assert keyed_emulator.stats()["requests"] == 0
    assert admin_call(keyed_emulator, "GET", "stats", None, {"x-api-key": KEY}) == 401
    assert admin_call(keyed_emulator, "GET", "stats", None, {"x-api-key": "rotated"}) == 200
    keyed_emulator.advance_clock(5)
    keyed_emulator.reset()
    assert keyed_emulator.configure()["api_key"] == KEY
    assert admin_call(keyed_emulator, "GET", "stats", None, {"x-api-key": KEY}) == 200


def test_without_a_key_the_admin_api_stays_open(emulator_reset: EmulatorServer) -> None:
    assert emulator_reset.config.api_key is None
    assert admin_call(emulator_reset, "GET", "config", None, {}) == 200
