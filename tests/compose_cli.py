"""Docker Compose itself, run as the validator of docker-compose.yml: ``docker-compose config`` checks the file
against the Compose schema, interpolates the variables and refuses a missing required one, with no Docker daemon.

Debian's ``docker-compose`` package (Compose 1.29 on bookworm, Compose 2 on later releases) provides it, and so
does Docker's compose plugin (``docker compose``). ``make test`` installs Debian's package when it runs as root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

INSTALL_HINT = (
    "docker-compose.yml is validated by Docker Compose itself (`docker-compose config`, no daemon needed). "
    "Install it: `apt-get install docker-compose` on Debian (`make test` does this when run as root), "
    "or Docker's compose plugin so that `docker compose version` works."
)
# The environment Compose runs in: only what a program needs, so that the developer's own POSTGRES_*,
# FLOWER_*, PLIMSOLL_* or COMPOSE_* variables take no part.
KEPT_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR")


def find_cli() -> list[str]:
    """The command that runs Compose; fails the test, saying how to install it, when there is none."""
    standalone = shutil.which("docker-compose")
    if standalone:
        return [standalone]
    docker = shutil.which("docker")
    if docker and subprocess.run([docker, "compose", "version"], capture_output=True, timeout=60).returncode == 0:
        return [docker, "compose"]
    pytest.fail(f"No Docker Compose CLI on PATH. {INSTALL_HINT}", pytrace=False)


class ComposeCli:
    """``config`` on one compose file, each distinct environment run once."""

    def __init__(self, compose_file: Path, empty_env_file: Path) -> None:
        self.command = find_cli()
        self.compose_file = compose_file
        # An empty --env-file, so that a developer's .env next to the compose file takes no part either.
        self.empty_env_file = empty_env_file
        empty_env_file.write_text("", encoding="utf-8")
        self._runs: dict[tuple[frozenset[tuple[str, str]], Path], subprocess.CompletedProcess[str]] = {}

    def config(self, env: Mapping[str, str], env_file: Path | None = None) -> subprocess.CompletedProcess[str]:
        env_file = env_file or self.empty_env_file
        key = (frozenset(env.items()), env_file)
        if key not in self._runs:
            base = {name: os.environ[name] for name in KEPT_VARIABLES if name in os.environ}
            args = ["--env-file", str(env_file), "--project-directory", str(self.compose_file.parent)]
            self._runs[key] = subprocess.run(
                [*self.command, *args, "-f", str(self.compose_file), "config"],
                env={**base, **env},
                capture_output=True,
                text=True,
                timeout=120,
            )
        return self._runs[key]

    def render(self, env: Mapping[str, str]) -> dict[str, Any]:
        """The file as Compose runs it in ``env``: validated, interpolated, ``depends_on`` in its long form."""
        result = self.config(env)
        assert result.returncode == 0, f"Compose refuses docker-compose.yml:\n{result.stderr}"
        rendered = yaml.safe_load(result.stdout)
        assert isinstance(rendered, dict)
        return rendered


def published_ports(service: Mapping[str, Any]) -> list[tuple[str, str, int]]:
    """(host address, host port, container port) of each published port. Compose 1 prints the short syntax
    (``127.0.0.1:8000:8000/tcp``), Compose 2 the long one."""
    result = []
    for entry in service.get("ports") or []:
        if isinstance(entry, dict):
            result.append((str(entry.get("host_ip", "")), str(entry.get("published", "")), int(entry["target"])))
        else:
            *host, target = str(entry).rsplit(":", 2)
            address, port = host if len(host) == 2 else ("", *host) if host else ("", "")
            result.append((address, port, int(target.split("/")[0])))
    return result
