"""Shared pytest configuration: fixtures live in one module per part of the system."""

import gc

import pytest

import tests.examples  # noqa: F401  registers the "check" profile before hypothesis loads one

pytest_plugins = [
    "tests.fixtures_emulator",
    "tests.fixtures_db",
    "tests.fixtures_worker",
    "tests.xdist_groups",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that asks for the session's Celery worker runs a real worker: ``make check`` leaves it out. Modules
    with real workers go first, whole and in order: the longest of their tests wait on a model's rate limit, and
    the rest fill the cores meanwhile instead of leaving one of them a long tail at the end."""
    for item in items:
        if "celery_worker" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.worker)
    with_workers = {item.path for item in items if item.get_closest_marker("worker")}
    items.sort(key=lambda item: item.path not in with_workers)


def pytest_collection_finish(session: pytest.Session) -> None:
    """What collecting imported (every module of ours, the SDKs, the tests) lives as long as the run: frozen, the
    garbage collector's full passes no longer walk it. They took about a tenth of `make check`'s CPU time."""
    gc.collect()
    gc.freeze()
