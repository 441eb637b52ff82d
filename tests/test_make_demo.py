"""The README's first command, as a new user runs it: `make demo` makes a venv of its own from the service's lock
(pip installs uv, uv the rest), installs Plimsoll and runs the main job on the embedded defaults, with none of
the suite's settings in its environment."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.install
def test_make_demo_installs_a_fresh_venv_and_runs_the_main_job(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PLIMSOLL_")}
    outcome = subprocess.run(
        ["make", "--no-print-directory", "demo", f"VENV={tmp_path / 'venv'}"],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip

    assert outcome.returncode == 0, outcome.stdout[-3000:] + outcome.stderr[-3000:]
    assert "chapters read and noted correctly" in outcome.stdout
    assert (tmp_path / "venv" / "bin" / "uv").exists()  # installed from requirements/uv.txt, then used
