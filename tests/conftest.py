"""Shared pytest configuration: fixtures live in one module per part of the system."""

pytest_plugins = [
    "tests.fixtures_emulator",
    "tests.fixtures_db",
    "tests.fixtures_worker",
]
