"""The lock files: every requirement of pyproject.toml pinned within its range, with hashes, the smaller locks at
the larger one's versions; and `make lock`, as docs/development.md shows it, leaves fresh locks as they are."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parent.parent
LOCKS = ROOT / "requirements"


def pins(lock: str) -> dict[str, str]:
    """What ``lock`` installs on this interpreter: name → version (a universal lock may pin a package once per
    range of Python versions, behind a marker)."""
    text = (LOCKS / lock).read_text(encoding="utf-8")
    found = {
        name: version
        for name, version, marker in re.findall(r"^([A-Za-z0-9_.\-]+)==(\S+)(?: ; (.*))? \\$", text, flags=re.MULTILINE)
        if not marker or Marker(marker).evaluate()
    }
    assert found, f"{lock} pins nothing"
    entries = re.split(r"\n(?=[A-Za-z0-9_.\-]+==)", text.split("\n", 2)[2])
    unhashed = [entry.split("==")[0] for entry in entries if "==" in entry and "--hash=sha256:" not in entry]
    assert not unhashed, f"{lock}: no hashes for {unhashed}"
    return {canonicalize_name(name): version for name, version in found.items()}


def requirements(*extras: str) -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    listed = project["dependencies"] + [r for extra in extras for r in project["optional-dependencies"][extra]]
    return [Requirement(r) for r in listed]


def test_every_requirement_is_pinned_within_its_range_with_hashes() -> None:
    dev = pins("dev.txt")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for lock, extras in (
        ("dev.txt", tuple(project["optional-dependencies"])),
        ("service.txt", ()),
        ("up.txt", ("up",)),
    ):
        pinned = pins(lock)
        for requirement in requirements(*extras):
            name = canonicalize_name(requirement.name)
            assert name in pinned, f"{lock} does not pin {name}: run make lock"
            assert requirement.specifier.contains(pinned[name], prereleases=True), f"{lock}: {name}=={pinned[name]}"
        assert {name: dev[name] for name in pinned} == pinned, f"{lock} and dev.txt pin different versions"
    assert "pytest" not in pins("service.txt")
    assert pins("uv.txt") == {"uv": dev["uv"]}  # pip installs uv first, and uv the rest


def test_make_lock_leaves_fresh_locks_as_they_are(tmp_path: Path) -> None:
    """`make lock` compiles the locks again (uv asks the package index, keeping every pin that still fits): on
    locks that are up to date with pyproject.toml it changes nothing."""
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(ROOT / name, tmp_path / name)
    shutil.copytree(LOCKS, tmp_path / "requirements")
    venv = Path(sys.prefix)
    subprocess.run(
        ["make", "--no-print-directory", "-o", "install-dev", "lock", f"VENV={venv}"],
        cwd=tmp_path,
        check=True,
        timeout=300,
        env={**os.environ, "UV_CACHE_DIR": str(tmp_path / "uv-cache")},
    )
    for lock in LOCKS.glob("*.txt"):
        assert (tmp_path / "requirements" / lock.name).read_text(encoding="utf-8") == lock.read_text(encoding="utf-8")
