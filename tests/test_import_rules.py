"""The rooms' import rules (pyproject.toml's import-linter contracts, run by `.ci/run` and `make lint`): the tree
keeps them, and the check fails when one is broken."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")


def lint_imports(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"],
        cwd=tree,
        env=os.environ | {"PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
        timeout=300,
    )


def test_the_tree_keeps_every_import_rule() -> None:
    checked = lint_imports(ROOT)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "0 broken" in checked.stdout


@pytest.mark.parametrize(
    ("module", "intruder"),
    [
        ("worker/legacy.py", "import emulator.ids"),  # the worker must not import the emulator
        ("plimsoll/history.py", "import models.tables"),  # the engine imports nothing of ours
        ("emulator/ids.py", "import plimsoll"),  # the emulator plays the provider
        ("bench/report.py", "import bench.budget_use"),  # a circle: budget_use imports report
        ("worker/legacy.py", "import estimate_fit.fit_shared"),  # the service never imports the fitting toolchain
        ("estimate_fit/fit_shared.py", "import bench.report"),  # the benchmarks import the toolchain, not the reverse
        ("testbed/stack.py", "import bench.report"),  # the benchmarks import the test bed, not the reverse
        ("api/client.py", "import testbed.stack"),  # the service never imports the test bed
        ("worker/step/claim.py", "import worker.step.reply"),  # a step's rooms: the claim comes before the reply
    ],
)
def test_the_check_fails_when_a_rule_is_broken(tmp_path: Path, module: str, intruder: str) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path)
    for package in project["tool"]["importlinter"]["root_packages"]:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "results"))
    with (tmp_path / module).open("a", encoding="utf-8") as source:
        source.write(f"\n{intruder}  # noqa\n")
    checked = lint_imports(tmp_path)
    assert checked.returncode == 1, checked.stdout + checked.stderr
    assert "BROKEN" in checked.stdout


def test_no_test_module_imports_another() -> None:
    """What test modules share lives in tests/support*.py and the fixtures_* plugins."""
    tests = Path(__file__).resolve().parent
    offenders = [
        f"{path.name}: {line.strip()}"
        for path in sorted(tests.glob("*.py"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith(("from tests.test_", "import tests.test_"))
    ]
    assert offenders == []
