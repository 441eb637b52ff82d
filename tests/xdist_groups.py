"""The suite's ``xdist_group`` marks must hold: modules that share an expensive fixture run on one worker. pytest
9.2 made pytest-xdist 3.8 ignore them without a word (pytest-xdist#1386): such a run stops before it starts."""

from __future__ import annotations

from importlib.metadata import version

import pytest
from packaging.version import Version


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("dist", default="no") != "loadgroup":
        return
    if Version(version("pytest")) >= Version("9.2") and Version(version("pytest-xdist")) <= Version("3.8.0"):
        raise pytest.UsageError(
            f"pytest {version('pytest')} with pytest-xdist {version('pytest-xdist')} ignores xdist_group marks "
            "(pytest-xdist#1386): install what requirements/dev.txt pins (make install-dev)"
        )
