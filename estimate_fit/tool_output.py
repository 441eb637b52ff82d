"""A test set of agent tool output, made from what this machine has: ``python -m estimate_fit.tool_output`` prints a
summary.

Every sample is what a coding agent's tool returns: ``find`` and directory views over the installed packages,
``ls -l``, ``pip list --format json``, JSON (pretty and compact) from real metadata, logs with timestamps and hex
ids, ``git log -p`` of this repository, Python, C, JS and minified JS sources (whole and as numbered ``cat -n``
views), ``grep -rn`` hits, pytest output, base64 and hex dumps of real files, runs of one repeated character and
numeric tables. Nothing is stored: the same machine and repository give the same set (files are taken in sorted
order, generated parts use fixed seeds). :func:`conversations` strings the samples into agent conversations.
``held_out=True`` draws the same kinds from other packages with other seeds: ``estimate_fit.fit_ascii`` fits the ASCII
weights on the default set, ``bench.estimator`` reports both.

Sources that are absent (no ``git``, no C headers, no minified JS in the environment) are left out, so the set
shrinks but never fails.
"""

from __future__ import annotations

import base64
import email
import json
import os
import random
import re
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SITE = Path(sysconfig.get_paths()["purelib"])
STDLIB = Path(sysconfig.get_paths()["stdlib"])
INCLUDE = Path(sysconfig.get_paths()["include"])
# The set must be the same in every checkout and venv: absolute paths are shown under one fixed prefix (where the
# set was first made), and listings show neither times nor the __pycache__ folders that running tests creates.
SHOWN_SITE = "/work/main/.venv/lib/python3.11/site-packages"
LS_TIME = "--time-style=+2026-11-30 12:00"
SIZES = (2_500, 6_000, 12_000, 24_000)  # characters of one result: agents' tools cut output at a few 10k
PACKAGES = (
    *("anthropic", "celery", "fastapi", "httpx", "hypothesis", "sqlalchemy", "pydantic", "_pytest", "click"),
    *("matplotlib", "kombu", "redis", "alembic", "starlette", "rich"),
)
# The held-out set: other packages, other files and other random draws, never used in fitting.
HELD_OUT_PACKAGES = ("numpy", "openai", "werkzeug", "mypy", "flower", "tiktoken")
HELD_OUT_SEED = 100
# The packages whose JavaScript the samples read, pinned as the C headers are: every installed package's was drawn
# until the docs site's toolchain (mkdocs, material) brought 78 scripts of its own and changed the sample.
SCRIPT_PACKAGES = ("fastapi_offline", "flower", "importlinter", "matplotlib", "schemathesis", "urllib3", "werkzeug")


@dataclass
class _Drawing:
    packages: tuple[str, ...] = PACKAGES
    seed: int = 0


_drawing = _Drawing()  # which set the makers below draw from: switched by tool_outputs()


@dataclass(frozen=True)
class Sample:
    kind: str
    name: str
    text: str


def _cut(text: str, size: int) -> str:
    """At most ``size`` characters, ending at a line break when there is one in the second half."""
    if len(text) <= size:
        return text
    end = text.rfind("\n", size // 2, size)
    return text[: end + 1 if end > 0 else size]


def _shown(path: Path) -> str:
    return str(path).replace(str(SITE), SHOWN_SITE, 1)


def _run(*command: str, cwd: Path | None = None) -> str:
    try:
        done = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return done.stdout


def _packages() -> list[Path]:
    return [SITE / name for name in _drawing.packages if (SITE / name).is_dir()]


def _rng(seed: int) -> random.Random:
    return random.Random(seed + _drawing.seed)


@cache
def _tree(folder: Path) -> tuple[Path, ...]:
    """Every path under ``folder`` outside ``__pycache__``, sorted: walked once, as the makers and both draws list
    the same folders again and again."""
    return tuple(sorted(p for p in folder.rglob("*") if "__pycache__" not in p.parts))


def _files(folder: Path, suffixes: tuple[str, ...]) -> list[Path]:
    return [p for p in _tree(folder) if p.suffix in suffixes and p.is_file()]


def _pick(paths: list[Path], count: int, seed: int) -> list[Path]:
    return sorted(_rng(seed).sample(paths, min(count, len(paths))))


def _sized(kind: str, texts: Iterator[tuple[str, str]]) -> list[Sample]:
    """One sample per text, cycling through :data:`SIZES`."""
    samples = []
    for n, (name, text) in enumerate(texts):
        cut = _cut(text, SIZES[n % len(SIZES)])
        if cut.strip():
            samples.append(Sample(kind, name, cut))
    return samples


def paths() -> list[Sample]:
    def listings() -> Iterator[tuple[str, str]]:
        for package in _packages():
            files = _tree(package)
            yield f"find {package.name} (absolute)", "".join(f"{_shown(p)}\n" for p in files)
            yield (
                f"find . -name '*.py' in {package.name}",
                "".join(f"./{p.relative_to(package)}\n" for p in files if p.suffix == ".py"),
            )

    return _sized("path list (find)", listings())


def directory_views() -> list[Sample]:
    def tree(folder: Path, depth: int, prefix: str = "") -> Iterator[str]:
        entries = sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.name != "__pycache__")
        for n, entry in enumerate(entries):
            last = n == len(entries) - 1
            yield f"{prefix}{'└── ' if last else '├── '}{entry.name}\n"
            if entry.is_dir() and depth > 1:
                yield from tree(entry, depth - 1, prefix + ("    " if last else "│   "))

    def two_levels(folder: Path) -> str:
        shown = _shown(folder)
        lines = [f"Here's the files and directories up to 2 levels deep in {shown}, excluding hidden items:\n"]
        for first in sorted(folder.iterdir()):
            if first.name.startswith(".") or first.name == "__pycache__":
                continue
            lines.append(f"{_shown(first)}\n")
            if first.is_dir():
                lines += [
                    f"{_shown(p)}\n" for p in sorted(first.iterdir()) if not p.name.startswith((".", "__pycache__"))
                ]
        return "".join(lines)

    def views() -> Iterator[tuple[str, str]]:
        for package in _packages():
            yield f"tree {package.name}", f"{package.name}\n" + "".join(tree(package, 3))
            yield f"view {package.name}", two_levels(package)

    return _sized("directory view (tree, 2 levels)", views())


TEMP_CHARS = "abcdefghijklmnopqrstuvwxyz0123456789_"  # what tempfile.mkdtemp names its folders with


def _temp_root(rng: random.Random, name: str) -> str:
    """A fresh temporary checkout, as agent harnesses make one per task: random segments in a long path."""
    segment = "tmp" + "".join(rng.choice(TEMP_CHARS) for _ in range(8))
    return rng.choice(
        (
            f"/tmp/{segment}/{name}",
            f"/tmp/{segment}/workspace/{name}__{name}-{rng.randint(1000, 99999)}",
            f"/private/var/folders/{rng.choice(TEMP_CHARS)}{rng.choice(TEMP_CHARS)}/"
            + "".join(rng.choice(TEMP_CHARS) for _ in range(30))
            + f"/T/{segment}/{name}",
            f"/tmp/pytest-of-agent/pytest-{rng.randint(0, 40)}/test_{name}{rng.randint(0, 9)}/{segment}",
        )
    )


def temp_listings() -> list[Sample]:
    """An agent's "files and directories up to 2 levels deep in /tmp/tmpab12cd/..." view, and ``find`` over the
    same checkout: every line an absolute path under a freshly drawn temporary folder."""
    rng = _rng(13)

    def entries(folder: Path, depth: int) -> Iterator[Path]:
        for entry in sorted(p for p in folder.iterdir() if not p.name.startswith(".") and p.name != "__pycache__"):
            yield entry
            if entry.is_dir() and depth > 1:
                yield from entries(entry, depth - 1)

    def views() -> Iterator[tuple[str, str]]:
        for package in _packages():
            for depth in (2, 3):
                root = _temp_root(rng, package.name)
                shown = [f"{root}/{p.relative_to(package)}" for p in entries(package, depth)]
                header = (
                    f"Here's the files and directories up to {depth} levels deep in {root}, excluding hidden items:\n"
                    if depth == 2
                    else ""
                )
                yield f"view {root}", header + f"{root}\n" + "".join(f"{line}\n" for line in shown)

    return _sized("listing under a temporary folder", views())


def agent_file_views() -> list[Sample]:
    """Source as agents' file viewers print it: a header naming the file under a temporary folder, then
    ``cat -n`` lines (six-wide numbers and a tab), often a range deep in a long file."""
    rng = _rng(14)
    files = [f for p in _packages() for f in _files(p, (".py", ".pyi", ".js", ".html", ".cfg", ".toml", ".txt"))]

    def views() -> Iterator[tuple[str, str]]:
        for path in _pick([f for f in files if f.stat().st_size > 3_000], 24, 15):
            lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
            start = 1 if rng.random() < 0.4 or len(lines) < 200 else rng.randint(1, len(lines) - 100)
            chosen = lines[start - 1 : start - 1 + rng.choice((60, 150, 400))]
            root = _temp_root(rng, path.parts[len(SITE.parts)])
            shown = f"{root}/{'/'.join(path.parts[len(SITE.parts) + 1 :])}"
            header = f"Here's the result of running `cat -n` on {shown}:\n"
            body = "".join(f"{n:6}\t{line}\n" for n, line in enumerate(chosen, start=start))
            yield f"view {shown}", header + body

    return _sized("source, numbered agent view", views())


VIEW_FLOOR = 0.95  # tests/test_estimate.py holds every profile to this on the views below


def claude_code_views_of_email() -> list[Sample]:
    """The first 200 lines of each module of the standard library's ``email`` package as Claude Code's Read tool
    shows them (six-wide numbers and an arrow): code that no fit has seen, in a view the fit discounts (the arrows);
    not in :func:`tool_outputs`."""
    views = []
    for path in sorted(Path(email.__file__).parent.glob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()[:200]
        views.append(
            Sample("Claude Code view", path.name, "".join(f"{n:>6}→{line}\n" for n, line in enumerate(lines, 1)))
        )
    return views


def api_json() -> list[Sample]:
    """JSON as API-calling tools return it (issues, pull requests, check runs): ids, URLs, hashes, dates and
    prose, pretty and compact."""
    rng = _rng(16)
    words = [p.stem for pkg in _packages() for p in _files(pkg, (".py",))] or ["item"]

    def record(n: int) -> dict[str, object]:
        repo = f"{rng.choice(words)}/{rng.choice(words)}"
        number = rng.randint(1, 40_000)
        return {
            "id": rng.getrandbits(40),
            "node_id": base64.b64encode(rng.getrandbits(96).to_bytes(12, "big")).decode(),
            "number": number,
            "url": f"https://api.example.test/repos/{repo}/issues/{number}",
            "title": " ".join(rng.choice(words).replace("_", " ") for _ in range(rng.randint(3, 9))),
            "state": rng.choice(["open", "closed"]),
            "user": {"login": rng.choice(words), "id": rng.getrandbits(24), "type": "User"},
            "labels": [{"name": rng.choice(words), "color": f"{rng.getrandbits(24):06x}"} for _ in range(3)],
            "created_at": f"2026-{rng.randint(1, 11):02d}-{rng.randint(1, 28):02d}T{rng.randint(0, 23):02d}:"
            f"{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}Z",
            "head": {"sha": f"{rng.getrandbits(160):040x}", "ref": f"fix/{rng.choice(words)}-{n}"},
            "body": " ".join(rng.choice(words) for _ in range(rng.randint(10, 80))),
            "comments": rng.randint(0, 50),
            "draft": rng.random() < 0.2,
        }

    texts = []
    for n in range(8):
        records = [record(i) for i in range(60)]
        texts.append((f"api pretty {n}", json.dumps(records, indent=2 if n % 2 else 4)))
        texts.append((f"api compact {n}", json.dumps(records, separators=(",", ":"))))
        texts.append((f"api default {n}", json.dumps(records)))
    return [
        *_sized("JSON pretty", iter(t for t in texts if "pretty" in t[0])),
        *_sized("JSON compact", iter(t for t in texts if "pretty" not in t[0])),
    ]


def test_logs() -> list[Sample]:
    """Test runs as agents see them on larger suites: pytest ``-v`` and ``-rA`` lines with long node ids,
    unittest's verbose runner, failures with tracebacks through a temporary checkout."""
    rng = _rng(17)
    modules = [p for pkg in _packages() for p in _files(pkg, (".py",)) if not p.name.startswith("_")] or [ROOT]
    outcomes = ["PASSED"] * 12 + ["FAILED", "SKIPPED", "XFAIL", "ERROR"]

    def log(n: int) -> str:
        root = _temp_root(rng, modules[0].parts[len(SITE.parts)] if len(modules[0].parts) > len(SITE.parts) else "repo")
        lines = [
            "============================= test session starts ==============================",
            f"platform linux -- Python 3.11.{rng.randint(2, 12)}, pytest-8.{rng.randint(0, 4)}.{rng.randint(0, 3)}, "
            "pluggy-1.5.0 -- /usr/bin/python3",
            f"rootdir: {root}",
            f"collected {rng.randint(100, 3000)} items",
            "",
        ]
        style = n % 3
        for i in range(rng.randint(80, 300)):
            module = rng.choice(modules)
            test = f"test_{module.stem}_{rng.choice(['returns', 'raises', 'handles', 'parses'])}_{i}"
            param = f"[{rng.choice(['a', 'b', 'utf-8', 'None', '0-1', 'True'])}-{rng.randint(0, 99)}]" if i % 3 else ""
            outcome = rng.choice(outcomes)
            node = f"tests/test_{module.stem}.py::Test{module.stem.title().replace('_', '')}::{test}{param}"
            if style == 0:
                lines.append(f"{node} {outcome}{' ' * rng.randint(1, 20)}[{min(99, i // 3):3}%]")
            elif style == 1:
                lines.append(f"{test} ({module.stem}.tests.Test{module.stem.title()}) ... {outcome.lower()}")
            else:
                lines.append(
                    f"{outcome} {node}"
                    + (f" - AssertionError: assert {rng.randint(0, 9)} == 1" if outcome == "FAILED" else "")
                )
            if outcome in ("FAILED", "ERROR") and rng.random() < 0.3:
                lines += [
                    "Traceback (most recent call last):",
                    f'  File "{root}/tests/test_{module.stem}.py", line {rng.randint(10, 900)}, in {test}',
                    f"    self.assertEqual(result, {rng.randint(0, 10**6)})",
                    f"AssertionError: {rng.randint(0, 10**6)} != {rng.randint(0, 10**6)}",
                ]
        summary = f"{rng.randint(1, 30)} failed, {rng.randint(50, 2900)} passed in {rng.uniform(1, 900):.2f}s"
        lines.append(f"========== {summary} ==========")
        return "\n".join(lines) + "\n"

    return _sized("test log (large suites)", iter([(f"test log {n}", log(n)) for n in range(8)]))


def ls_long() -> list[Sample]:
    def listings() -> Iterator[tuple[str, str]]:
        for package in _packages():
            ls = ("ls", "--ignore=__pycache__", LS_TIME)
            yield f"ls -la {package.name}", _run(*ls, "-lA", str(package)).replace(str(SITE), SHOWN_SITE)
            yield f"ls -lR {package.name}", _run(*ls, "-lR", str(package)).replace(str(SITE), SHOWN_SITE)

    return _sized("ls -l", listings())


@cache
def _installed() -> list[dict[str, str]]:
    listed = _run(sys.executable, "-m", "pip", "list", "--format", "json", "--disable-pip-version-check")
    # This checkout's own (editable) entry names where it lies; shown under one path, the set does not.
    return list(json.loads(listed.replace(json.dumps(str(ROOT))[1:-1], "/work/main"))) if listed.strip() else []


def _metadata() -> list[dict[str, object]]:
    """Every installed distribution's metadata as a record, as a package-inspecting tool returns it."""
    records = []
    for info in sorted(SITE.glob("*.dist-info")):
        meta = info / "METADATA"
        if not meta.is_file():
            continue
        record: dict[str, object] = {}
        for line in meta.read_text(encoding="utf-8", errors="replace").split("\n\n", 1)[0].splitlines():
            key, _, value = line.partition(": ")
            if value:
                if key in record:
                    previous = record[key]
                    record[key] = [*previous, value] if isinstance(previous, list) else [previous, value]
                else:
                    record[key] = value
        record["files"] = len((info / "RECORD").read_text().splitlines()) if (info / "RECORD").is_file() else 0
        records.append(record)
    return records


def json_output() -> list[Sample]:
    installed = _installed()
    samples = []
    if installed:
        samples.append(Sample("pip list --format json", "pip list --format json", json.dumps(installed)))
        samples += _sized(
            "pip list --format json",
            iter([(f"pip list json, part {n}", json.dumps(installed[n::3])) for n in range(3)]),
        )
    records = _metadata()
    pretty = [(f"metadata indent {2 + n % 3}", json.dumps(records[n::5], indent=2 + n % 3)) for n in range(5)]
    compact = [(f"metadata compact {n}", json.dumps(records[n::5], separators=(",", ":"))) for n in range(5)]
    samples += _sized("JSON pretty", iter([*pretty, *_browser_states()]))
    samples += _sized("JSON compact", iter(compact))
    return samples


def _browser_states() -> list[tuple[str, str]]:
    """Pretty-printed page states as browser agents receive them: nested elements with ids, roles, names."""
    rng = _rng(11)
    words = [p.stem for p in _files(SITE / "anthropic", (".py",))] or ["item"]
    states = []
    for n in range(3):
        elements = [
            {
                "index": i,
                "tag": rng.choice(["a", "button", "input", "div", "span", "li"]),
                "role": rng.choice(["link", "button", "textbox", "listitem", None]),
                "name": " ".join(rng.choice(words).replace("_", " ") for _ in range(rng.randint(1, 4))),
                "bbox": {"x": rng.randint(0, 1280), "y": rng.randint(0, 4000), "w": rng.randint(8, 600), "h": 24},
                "visible": rng.random() < 0.8,
                "attributes": {"id": f"el-{rng.getrandbits(32):08x}", "class": rng.choice(words)},
            }
            for i in range(120)
        ]
        state = {"url": f"https://example.test/{rng.choice(words)}?page={n}", "title": words[n], "elements": elements}
        states.append((f"browser state {n}", json.dumps(state, indent=2)))
    return states


def logs() -> list[Sample]:
    rng = _rng(5)
    modules = [p.stem for p in _files(SITE / "celery", (".py",))] or ["worker"]
    levels = ["INFO"] * 6 + ["DEBUG"] * 3 + ["WARNING", "ERROR"]
    verbs = ["received", "started", "succeeded in", "retrying", "acked", "connected to", "published", "timed out"]
    texts = []
    for n in range(8):
        lines, clock = [], 1_795_000_000.0 + n * 86_400
        for _ in range(400):
            clock += rng.expovariate(2.0)
            stamp = f"2026-11-{1 + n:02d}T{int(clock) % 86400 // 3600:02d}:{int(clock) % 3600 // 60:02d}:" + (
                f"{clock % 60:06.3f}Z"
            )
            task = f"{rng.getrandbits(128):032x}"
            task = f"{task[:8]}-{task[8:12]}-{task[12:16]}-{task[16:20]}-{task[20:]}"
            fmt = n % 3
            verb = rng.choice(verbs)
            if fmt == 0:
                line = f"[{stamp}] {rng.choice(levels)}/{rng.choice(modules)}: Task run_step[{task}] {verb}"
                line += f" {rng.uniform(0, 3):.6f}s" if verb == "succeeded in" else ""
            elif fmt == 1:
                line = (
                    f"{stamp} {rng.choice(levels):7} pid={rng.randint(1000, 65000)} trace={rng.getrandbits(64):016x}"
                    f" span={rng.getrandbits(32):08x} {rng.choice(modules)}.{rng.choice(modules)} {verb}"
                    f" bytes={rng.randint(0, 10**6)} sha={rng.getrandbits(160):040x}"
                )
            else:
                line = json.dumps(
                    {
                        "ts": stamp,
                        "level": rng.choice(levels).lower(),
                        "logger": rng.choice(modules),
                        "msg": verb,
                        "request_id": task,
                        "duration_ms": round(rng.uniform(0, 900), 2),
                    }
                )
            lines.append(line + "\n")
        texts.append((f"log format {n % 3} day {n}", "".join(lines)))
    return _sized("log (timestamps, hex ids)", iter(texts))


def diffs() -> list[Sample]:
    # The first 30 commits of this repository (the next 30 for the held-out set): the set stays the same as the
    # history grows.
    start = 30 if _drawing.seed else 0
    chosen = _run("git", "rev-list", "--reverse", "HEAD", cwd=ROOT).split()[start : start + 30]
    log = _run("git", "log", "-p", "--no-color", "-n", str(len(chosen)), chosen[-1], cwd=ROOT) if chosen else ""
    commits = [c for c in ("\n" + log).split("\ncommit ") if c.strip()]
    return _sized("git log -p", iter([(f"git log -p, commit {n}", "commit " + c) for n, c in enumerate(commits)]))


def sources() -> list[Sample]:
    # The standard library's own modules, not the base interpreter's site-packages: what the machine installed.
    stdlib = [f for f in _files(STDLIB, (".py",)) if "site-packages" not in f.parts]
    python = _pick(stdlib, 12, 1) + _pick([f for p in _packages() for f in _files(p, (".py",))], 8, 2)
    # C headers of the pinned interpreter and of the locked numpy, not /usr/include, whose Debian packages differ
    # from one machine to the next (and so did the set, and every figure made from it).
    c_files = _pick(_files(INCLUDE, (".h",)), 8, 3) + _pick(_files(SITE / "numpy", (".h",)), 8, 4)
    shipped = [f for f in _files(SITE, (".js", ".mjs")) if f.relative_to(SITE).parts[0] in SCRIPT_PACKAGES]
    scripts = [f for f in shipped if ".min." not in f.name]
    minified = [f for f in shipped if f.suffix == ".js" and ".min." in f.name]

    def read(files: list[Path]) -> Iterator[tuple[str, str]]:
        for f in files:
            text = f.read_text(encoding="utf-8", errors="replace")
            if len(text) >= 1_500:
                yield str(f.relative_to(f.anchor)), text

    def numbered(files: list[Path]) -> Iterator[tuple[str, str]]:
        for name, text in read(files):
            lines = text.splitlines()[:400]
            yield f"cat -n {name}", "".join(f"{n:6}\t{line}\n" for n, line in enumerate(lines, start=1))

    return [
        *_sized("Python source", read(python)),
        *_sized("source, cat -n view", numbered(python[::2] + c_files[::3])),
        *_sized("C source", read(c_files)),
        *_sized("JS source", read(_pick(scripts, 8, 5))),
        *_sized("minified JS", read(_pick(minified, 6, 6))),
    ]


def grep_hits() -> list[Sample]:
    def hits() -> Iterator[tuple[str, str]]:
        for package, pattern in zip(_packages(), ("def ", "import", "class ", "self", "return"), strict=False):
            found = _run("grep", "-rn", pattern, str(package), "--include=*.py").replace(str(SITE), SHOWN_SITE)
            # grep walks folders in the file system's order, which differs between installs: sorted, it does not
            yield f"grep -rn {pattern!r} {package.name}", "".join(sorted(found.splitlines(keepends=True)))

    return _sized("grep -rn", hits())


TEST_MODULE = """
import json
import pytest

@pytest.mark.parametrize("n", range(40))
def test_round_trip(n):
    assert json.loads(json.dumps({"n": n})) == {"n": n}

@pytest.mark.parametrize("n", range(6))
def test_sizes(n):
    data = {"values": list(range(n * 7)), "label": "x" * n}
    assert len(data["values"]) == n * 6, data

def test_nested():
    left = {"a": [1, 2, {"b": "c"}], "d": {"e": [3.5, None]}}
    right = {"a": [1, 2, {"b": "C"}], "d": {"e": [3.5, None]}}
    assert left == right

def test_raises():
    with pytest.raises(KeyError):
        {}.get("missing")
"""


# pytest runs in one interpreter, three times: its plugins take seconds to import, paid once (and the output is
# what three `python -m pytest` processes print, byte for byte).
PYTEST_RUNS = {"pytest -v": ("-v",), "pytest -q": ("-q",), "pytest --tb=long": ("--tb=long", "-q")}
RUN_PYTEST = """
import contextlib, io, json, sys
import pytest
printed = []
for arguments in json.loads(sys.argv[1]):
    with contextlib.redirect_stdout(io.StringIO()) as out:
        pytest.main(arguments)
    printed.append(out.getvalue())
sys.stdout.write(json.dumps(printed))
"""


@cache  # reads no package, so the same in both sets: run once
def _pytest_runs() -> tuple[tuple[str, str], ...]:
    with tempfile.TemporaryDirectory() as folder:
        Path(folder, "test_sample.py").write_text(TEST_MODULE)
        base = ("-p", "no:cacheprovider", "--rootdir", folder, ".")
        arguments = [[*base, *options] for options in PYTEST_RUNS.values()]
        # run from the folder: the paths pytest shows do not depend on where we are
        printed = _run(sys.executable, "-c", RUN_PYTEST, json.dumps(arguments), cwd=Path(folder))
        runs = list(zip(PYTEST_RUNS, json.loads(printed) if printed else [], strict=False))
    # The durations differ from run to run: written as one figure, the set stays the same.
    runs = [(n, re.sub(r"\d+\.\d+s\b", "0.12s", t.replace(folder, "/tmp/project"))) for n, t in runs]
    return tuple((n, t.replace(str(ROOT), "/work/main")) for n, t in runs)  # the interpreter's path names the checkout


def test_runs() -> list[Sample]:
    return _sized("pytest output", iter(_pytest_runs()))


def encoded() -> list[Sample]:
    binaries = _pick([f for f in _files(SITE, (".so",)) if f.stat().st_size > 40_000], 4, 7)
    samples = []
    for n, path in enumerate(binaries):
        data = path.read_bytes()[4096 : 4096 + 9_000]
        samples.append(Sample("base64", f"base64 {path.name}", base64.encodebytes(data).decode()))
        samples.append(Sample("base64", f"base64 one line {path.name}", base64.b64encode(data[:6_000]).decode()))
        dump = _run("xxd", str(path)) if n < 2 else _run("od", "-A", "x", "-t", "x1z", str(path))
        samples.append(Sample("hex dump, hashes", f"hex dump {path.name}", _cut(dump, SIZES[n % len(SIZES)])))
    compressed = _pick([f for f in _files(SITE, (".png", ".gz")) if f.stat().st_size > 12_000], 4, 12)
    for n, path in enumerate(compressed):  # compressed bytes look random: images as agents see them
        data = path.read_bytes()[:9_000]
        mime = "image/png" if path.suffix == ".png" else "application/gzip"
        encoded = base64.b64encode(data).decode()
        text = base64.encodebytes(data).decode() if n % 2 else f"data:{mime};base64,{encoded}"
        samples.append(Sample("base64", f"base64 {path.name}", text))
    hashed = _pick(_files(SITE / "celery", (".py",)), 60, 8)
    hashes = _run("sha256sum", *map(str, hashed)).replace(str(SITE), SHOWN_SITE)
    samples.append(Sample("hex dump, hashes", "sha256sum", hashes))
    return [s for s in samples if s.text.strip()]


def repeats() -> list[Sample]:
    rng = _rng(9)
    samples = []
    for n, char in enumerate("=-#*~_. 0"):
        length = (40, 80, 120, 2_000)[n % 4]
        lines = [
            char * length + "\n" if rng.random() < 0.7 else f"{char * 10} section {i} {char * 10}\n"
            for i in range(max(1, 6_000 // length))
        ]
        samples.append(Sample("runs of one character", f"runs of {char!r}", "".join(lines)))
    bits = "".join(f"{rng.getrandbits(64):064b}\n" for _ in range(120))
    samples.append(Sample("runs of one character", "binary digit strings", bits))
    return samples


def numeric_tables() -> list[Sample]:
    rng = _rng(10)
    samples = []
    for n in range(6):
        columns = rng.randint(3, 9)
        rows = [
            "\t".join(f"{rng.gauss(0, 10 ** rng.randint(0, 5)):.{rng.randint(0, 6)}f}" for _ in range(columns))
            for _ in range(SIZES[n % len(SIZES)] // (columns * 9))
        ]
        if n % 2:
            rows = [",".join(r.split("\t")) for r in rows]
        samples.append(Sample("numeric table", f"table {n}", "\n".join(rows) + "\n"))
    matrix = "\n".join("[" + " ".join(f"{rng.uniform(-1, 1): .8e}" for _ in range(6)) + "]" for _ in range(120))
    samples.append(Sample("numeric table", "printed array", matrix))
    return [s for s in samples if s.text.strip()]


WRITTEN = {  # what an agent writes, by the kind of file
    "Python": (".py",),
    "web (JS, HTML, CSS)": (".js", ".html", ".css"),
    "text (Markdown, templates, config)": (".md", ".txt", ".rst", ".mako", ".toml", ".cfg", ".ini"),
}
WRITTEN_KINDS = {language: f"{language}, written by a tool call" for language in WRITTEN}


def _written_files() -> list[Sample]:
    """Files as an agent writes them, the content JSON-escaped in its tool call (:func:`_write_calls`)."""
    samples = []
    for seed, (language, suffixes) in enumerate(WRITTEN.items(), start=20):
        files = [f for p in _packages() for f in _files(p, suffixes) if ".min." not in f.name]
        readable = [f for f in files if f.stat().st_size >= 1_500]
        samples += [
            Sample(WRITTEN_KINDS[language], name, call) for name, call in _write_calls(_pick(readable, 8, seed))
        ]
    return samples


def _write_calls(files: list[Path]) -> Iterator[tuple[str, str]]:
    """Each file cut to the next of :data:`SIZES`, written alternately by a Claude Code Write call as
    ``estimate_fit.trajectories`` writes calls (``json.dumps(indent=2)``) and by OpenAI function-call arguments
    (compact)."""
    for n, path in enumerate(files):
        text = _cut(path.read_text(encoding="utf-8", errors="replace"), SIZES[n % len(SIZES)])
        shown = _shown(path)
        if n % 2:
            yield f"write {shown}", json.dumps({"path": shown, "content": text})
        else:
            call = {"name": "Write", "input": {"file_path": shown, "content": text}}
            yield f"Write {shown}", json.dumps(call, indent=2)


@cache  # here, not on the callers: a cache keys on the arguments as given, and tool_outputs() is tool_outputs(False)
def _drawn(makers: tuple[Callable[[], list[Sample]], ...], held_out: bool) -> tuple[Sample, ...]:
    """What ``makers`` make from the default set's packages and seeds, or (``held_out``) from the held-out set's."""
    _drawing.packages, _drawing.seed = (HELD_OUT_PACKAGES, HELD_OUT_SEED) if held_out else (PACKAGES, 0)
    try:
        return tuple(s for make in makers for s in make())
    finally:
        _drawing.packages, _drawing.seed = PACKAGES, 0


TOOL_OUTPUT_MAKERS = (
    *(paths, directory_views, temp_listings, ls_long, json_output, api_json, logs, diffs),
    *(sources, agent_file_views, grep_hits, test_runs, test_logs, encoded, repeats, numeric_tables),
)


def tool_outputs(held_out: bool = False) -> tuple[Sample, ...]:
    """The whole set, in a fixed order; ``held_out``: the set drawn from other packages and seeds."""
    return _drawn(TOOL_OUTPUT_MAKERS, held_out)


def written_files(held_out: bool = False) -> tuple[Sample, ...]:
    """Files written through tool calls (:func:`_written_files`): assistant messages, not tool output, so not in
    :func:`tool_outputs` (``estimate_fit.fit_ascii`` fits to them, ``bench.estimator`` reports them); ``held_out``:
    other packages."""
    return _drawn((_written_files,), held_out)


INSTRUCTIONS = (
    "Fix the failing test in the repository: the JSON round trip loses the label. Find the cause and patch it.",
    "Look through the installed packages and tell me which ones ship JavaScript, and how large it is.",
    "The worker logs show retries after midnight; find which tasks retried and why, then summarise.",
    "Review the last commits of this repository and list anything that could break the API.",
)
THOUGHTS = (
    "Let me look at the directory structure first to see where the relevant code lives.",
    "I'll check the test output to understand which assertions fail and why.",
    "That file is long; let me search for the function definition instead of reading everything.",
    "The log has many entries; I'll filter for errors and look at the request ids around them.",
    "Now I understand the layout. Next I will read the module that builds the request.",
)


# How often an agent's tool returns each kind, roughly, in coding agents' conversations: mostly source views,
# searches, listings, test runs and diffs; encoded blobs and separator runs now and then.
KIND_WEIGHTS = {
    "path list (find)": 3,
    "directory view (tree, 2 levels)": 3,
    "ls -l": 2,
    "pip list --format json": 1,
    "JSON pretty": 2,
    "JSON compact": 1,
    "log (timestamps, hex ids)": 2,
    "git log -p": 3,
    "Python source": 4,
    "source, cat -n view": 2,
    "source, numbered agent view": 5,
    "listing under a temporary folder": 3,
    "test log (large suites)": 2,
    "C source": 1,
    "JS source": 1,
    "minified JS": 0.5,
    "grep -rn": 4,
    "pytest output": 3,
    "base64": 0.5,
    "hex dump, hashes": 0.5,
    "runs of one character": 0.5,
    "numeric table": 1,
}


@dataclass(frozen=True)
class Conversation:
    name: str
    parts: tuple[str, ...]  # every message's text: the instruction, assistant text and calls, tool results


def conversations(count: int = 40, seed: int = 3, held_out: bool = False) -> list[Conversation]:
    """Agent conversations: an instruction, then rounds of thought + tool calls + results (1-3 calls a round),
    the kinds drawn by :data:`KIND_WEIGHTS`."""
    rng = random.Random(seed + (HELD_OUT_SEED if held_out else 0))
    by_kind: dict[str, list[Sample]] = {}
    for sample in tool_outputs(held_out):
        by_kind.setdefault(sample.kind, []).append(sample)
    kinds = list(by_kind)
    weights = [KIND_WEIGHTS.get(kind, 1) for kind in kinds]
    made = []
    for n in range(count):
        parts = [rng.choice(INSTRUCTIONS)]
        for _ in range(rng.randint(4, 30)):
            results = [rng.choice(by_kind[k]) for k in rng.choices(kinds, weights, k=rng.choice((1, 1, 1, 2, 3)))]
            calls = [json.dumps({"name": "bash", "input": {"command": r.name}}) for r in results]
            parts.append(rng.choice(THOUGHTS) + "\n" + "\n".join(calls))
            parts += [r.text for r in results]
        parts.append("Done: " + rng.choice(THOUGHTS))
        made.append(Conversation(f"conversation {n}", tuple(parts)))
    return made


def main() -> None:
    by_kind: dict[str, list[Sample]] = {}
    for sample in tool_outputs():
        by_kind.setdefault(sample.kind, []).append(sample)
    for kind, samples in by_kind.items():
        print(f"{kind:36} {len(samples):4} samples {sum(len(s.text) for s in samples):>10,} chars")
    print(f"{len(conversations())} conversations", file=sys.stderr if os.environ.get("QUIET") else sys.stdout)


if __name__ == "__main__":
    main()
