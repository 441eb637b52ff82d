"""The command line starts in a blink: `plimsoll --help`, `jobs` and `watch` import only what they need (no
model SDK, no database library, no Celery), measured against `python -c pass` on the same machine in the same
run (the fastest of seven interleaved runs each: the load of a shared machine only ever adds to a start-up, and a
median of five moved `watch` from 1.1x to 1.5x the libraries' time between two CI runs of the same CLI), never as a
wall-clock limit. The figures are printed.

`jobs` and `watch` need typer, httpx, pydantic and rich to do their work at all: they are held to the time it
takes to import just those (``LIBRARIES``), plus a little for our own modules."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

UNREACHABLE = ["--api-url", "http://127.0.0.1:9", "--api-key", "pls_startup"]  # refused at once: exit 1
COMMANDS = {
    "plimsoll --help": ["--help"],
    "plimsoll jobs": ["jobs", *UNREACHABLE],
    "plimsoll watch 1": ["watch", "1", *UNREACHABLE],
}
LIBRARIES = (  # what any command that asks the API does with its libraries: a client, a model, a console
    "import typer, httpx, rich.console, rich.table, rich.live\n"
    "from pydantic import BaseModel\n"
    "class Answer(BaseModel):\n    id: int\n"
    "httpx.Client(); rich.console.Console()"
)
RUNS = 7
HELP_RATIO = 10.0  # × `python -c pass`: 0.3 s where Python itself starts in 0.03 s
OVER_LIBRARIES = 1.5  # × the import of the libraries a command cannot do without


def fastest_seconds(commands: dict[str, list[str]]) -> dict[str, float]:
    """The fastest wall time of each command over ``RUNS`` rounds, the commands interleaved within a round so
    that the load of a shared machine falls on all of them alike."""
    times: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(RUNS):
        for name, argv in commands.items():
            started = time.perf_counter()
            subprocess.run(argv, capture_output=True, check=False)
            times[name].append(time.perf_counter() - started)
    return {name: min(each) for name, each in times.items()}


@pytest.mark.serial  # start-up times against `python -c pass`: a parallel load moves them unevenly
def test_the_command_line_starts_in_a_blink(capsys: pytest.CaptureFixture[str]) -> None:
    commands = {"python -c pass": [sys.executable, "-c", "pass"], "the libraries": [sys.executable, "-c", LIBRARIES]}
    commands |= {name: [sys.executable, "-m", "cli", *args] for name, args in COMMANDS.items()}
    fastest = fastest_seconds(commands)
    python, libraries = fastest["python -c pass"], fastest["the libraries"]
    with capsys.disabled():
        print(f"\nCLI start-up, fastest of {RUNS}:")
        for name, seconds in fastest.items():
            print(f"  {name:<18} {seconds:6.3f} s  {seconds / python:5.1f}x python -c pass")

    assert fastest["plimsoll --help"] <= HELP_RATIO * python
    for name in ("plimsoll jobs", "plimsoll watch 1"):
        assert fastest[name] <= OVER_LIBRARIES * libraries, f"{name} imports more than it needs"


@pytest.mark.parametrize("args", list(COMMANDS.values()), ids=list(COMMANDS))
def test_no_command_imports_a_model_sdk_the_database_or_celery(args: list[str]) -> None:
    probe = (
        "import runpy, sys\n"
        f"sys.argv = ['plimsoll', *{args!r}]\n"
        "try:\n"
        "    runpy.run_module('cli', run_name='__main__')\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted({'anthropic', 'openai', 'sqlalchemy', 'celery', 'fastapi', 'tiktoken'} & set(sys.modules))\n"
        "print('loaded:', *heavy)\n"
    )
    run = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False)
    assert run.stdout.splitlines()[-1] == "loaded:", run.stdout + run.stderr
