"""docker-compose.yml, the Dockerfile and .dockerignore, checked without a Docker daemon.

Docker Compose itself validates the file (``docker-compose config``, see tests/compose_cli.py): the schema, the
interpolation with sample values for the required variables, and the refusal without them. The tests here check
what Compose cannot know about Plimsoll in the file as Compose renders it: the services and the order they
start in, healthchecks that ask the service itself (the HTTP ones run against local servers), the worker's
queue and options, Flower's login, the settings every Plimsoll service gets and where they point, the absence of
secrets, the documentation of every variable, and that every command names code and options that exist.
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import http.server
import os
import re
import shlex
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import click
import pytest
import yaml
from sqlalchemy.engine import make_url

from emulator import EmulatorServer
from testbed.stack import free_port
from tests.compose_cli import ComposeCli, published_ports

ROOT = Path(__file__).resolve().parent.parent
COMPOSE_FILE = ROOT / "docker-compose.yml"
DOCKERFILE = ROOT / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
COMPOSE_DOC = ROOT / "docs" / "compose.md"
ENV_EXAMPLE = ROOT / ".env.example"

REQUIRED_SERVICES = {"postgres", "redis", "migrate", "api", "worker", "flower", "emulator"}
PLIMSOLL_SERVICES = ("migrate", "api", "worker", "flower")  # run Plimsoll code: they get its settings
APP_IMAGE_SERVICES = (*PLIMSOLL_SERVICES, "emulator")  # run from the image the Dockerfile builds
ONE_SHOT_SERVICES = ("migrate",)
LONG_RUNNING_SERVICES = tuple(sorted(REQUIRED_SERVICES - set(ONE_SHOT_SERVICES)))

# Who waits for whom, and for what: the migrations run once PostgreSQL answers; the API and the workers start
# only after they have finished, and once Redis (and, for the workers, the model) answers.
EXPECTED_DEPENDENCIES = {
    "migrate": {"postgres": "service_healthy"},
    "api": {"migrate": "service_completed_successfully", "redis": "service_healthy"},
    "worker": {"migrate": "service_completed_successfully", "redis": "service_healthy", "emulator": "service_healthy"},
    "flower": {"redis": "service_healthy"},
}

# The variables without which no `docker compose` command may run, and sample values for them.
REQUIRED_VARIABLES = ("POSTGRES_PASSWORD", "FLOWER_USER", "FLOWER_PASSWORD")
SAMPLE_ENV = {
    "POSTGRES_PASSWORD": "pg-sentinel-password",
    "FLOWER_USER": "flower-sentinel-user",
    "FLOWER_PASSWORD": "flower-sentinel-password",
}
# The variable, documented in docs/compose.md, that moves each published port on the host.
HOST_PORT_VARIABLES = {"api": "API_PORT", "flower": "FLOWER_PORT", "emulator": "EMULATOR_PORT"}
# Plimsoll settings compose writes itself rather than passing them on from the environment.
SETTINGS_SET_BY_COMPOSE = {"PLIMSOLL_QUEUE", "PLIMSOLL_DATABASE_URL"}

# What each image can run in a healthcheck: the app image is python:3.11-slim plus our dependencies (no curl,
# no wget); the official postgres and redis images bring their own clients.
HEALTHCHECK_PROGRAMS = {"app": {"python", "celery"}, "postgres": {"pg_isready"}, "redis": {"redis-cli"}}
HTTP_HEALTH_PATHS = {"api": "/healthz", "flower": "/healthcheck", "emulator": "/v1/emulator/config"}

SECRET_NAME = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|AUTH|DSN|CREDENTIAL|PRIVATE", re.IGNORECASE)
SECRET_PATTERNS = {
    "Anthropic key": re.compile(r"sk-ant-[A-Za-z0-9_-]{8,}"),
    "OpenAI key": re.compile(r"\bsk-(?:proj-)?[A-Za-z0-9]{20,}"),
    "AWS key": re.compile(r"\bAKIA[0-9A-Z]{16}\b"),
    "private key": re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----"),
    "Sentry DSN": re.compile(r"https?://[0-9a-f]{32}@"),
}
URL_WITH_PASSWORD = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@]+:(?P<password>[^@\s]+)@", re.IGNORECASE)
# A variable's name where the file reads it ($$ is a literal dollar sign, not a reference).
VARIABLE_READ = re.compile(r"(?<!\$)\$\{?([A-Za-z_][A-Za-z0-9_]*)")


# --- the file, as written and as Compose renders it -------------------------------------------------------------


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory) -> ComposeCli:
    return ComposeCli(COMPOSE_FILE, tmp_path_factory.mktemp("compose") / "empty.env")


@pytest.fixture(scope="module")
def compose(cli: ComposeCli) -> dict[str, Any]:
    """The file as Compose runs it when only the required variables are set."""
    return cli.render(SAMPLE_ENV)


@pytest.fixture(scope="module")
def raw() -> dict[str, Any]:
    """The file as written (PyYAML resolves its anchors and ``<<`` merges): ``${...}`` not interpolated."""
    data = yaml.safe_load(COMPOSE_FILE.read_text(encoding="utf-8"))
    assert isinstance(data, dict), "docker-compose.yml is not a mapping"
    return data


def string_values(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for value in node.values():
            yield from string_values(value)
    elif isinstance(node, list):
        for value in node:
            yield from string_values(value)
    elif isinstance(node, str):
        yield node


def environment(service: dict[str, Any]) -> dict[str, str | None]:
    """A service's environment as a mapping; None: passed on from the environment Compose runs in, and not set
    there (Compose 1 prints such a variable with no value, Compose 2 leaves it out)."""
    entries = service.get("environment") or {}
    if isinstance(entries, list):
        pairs = (entry.partition("=") for entry in entries)
        return {name: value if sep else None for name, sep, value in pairs}
    return {name: None if value is None else str(value) for name, value in entries.items()}


def plimsoll_environment(service: dict[str, Any]) -> dict[str, str | None]:
    return {name: value for name, value in environment(service).items() if name.startswith("PLIMSOLL_")}


def variables_read(raw: dict[str, Any]) -> set[str]:
    """Every variable the file reads: those it interpolates and those it passes on to a service."""
    names = {name for text in string_values(raw) for name in VARIABLE_READ.findall(text)}
    for service in raw["services"].values():
        names |= {name for name, value in environment(service).items() if value is None}
    return names


def command(service: dict[str, Any]) -> list[str]:
    value = service.get("command")
    assert value, "no command"
    return shlex.split(value) if isinstance(value, str) else [str(part) for part in value]


def option(args: list[str], *names: str) -> str | None:
    """The value of ``--name=value`` or ``--name value`` (the first of ``names`` present)."""
    for i, arg in enumerate(args):
        for name in names:
            if arg.startswith(f"{name}="):
                return arg.split("=", 1)[1]
            if arg == name and i + 1 < len(args):
                return args[i + 1]
    return None


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    entries = service.get("depends_on") or {}
    if isinstance(entries, list):
        return dict.fromkeys(entries, "service_started")
    return {name: (spec or {}).get("condition", "service_started") for name, spec in entries.items()}


def healthcheck_args(service: dict[str, Any]) -> tuple[str, list[str]]:
    """(``CMD`` or ``CMD-SHELL``, the command as words)."""
    test = service["healthcheck"]["test"]
    if isinstance(test, str):
        return "CMD-SHELL", shlex.split(test)
    kind, *rest = test
    return kind, shlex.split(rest[0]) if kind == "CMD-SHELL" else rest


def image_kind(name: str, service: dict[str, Any]) -> str:
    return "app" if name in APP_IMAGE_SERVICES else str(service["image"]).split(":")[0].split("/")[-1]


def listening_port(name: str, compose: dict[str, Any]) -> int:
    port = option(command(compose["services"][name]), "--port")
    assert port is not None, f"{name}: the command does not say which port it listens on"
    return int(port)


def duration_seconds(text: str) -> float:
    parts = re.fullmatch(r"(?:(\d+)h)?(?:(\d+)m)?(?:(\d+(?:\.\d+)?)s)?(?:(\d+)ms)?", str(text))
    assert parts and any(parts.groups()), f"not a Compose duration: {text!r}"
    hours, minutes, seconds, millis = (float(group or 0) for group in parts.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


def module_file(module: str) -> Path:
    """The file of an importable module of this repository (a package's ``__init__.py``)."""
    path = ROOT.joinpath(*module.split("."))
    for candidate in (path.with_suffix(".py"), path / "__init__.py"):
        if candidate.is_file():
            return candidate
    raise AssertionError(f"no module {module} in the repository")


def assert_defines(target: str) -> None:
    """``module:attribute`` names a module of the repository, installed by ``pip install .``, that assigns
    ``attribute`` at its top level."""
    module, _, attribute = target.partition(":")
    tree = ast.parse(module_file(module).read_text(encoding="utf-8"))
    names = {
        target.id
        for node in tree.body
        if isinstance(node, ast.Assign | ast.AnnAssign)
        for target in (node.targets if isinstance(node, ast.Assign) else [node.target])
        if isinstance(target, ast.Name)
    }
    assert attribute in names, f"{module} assigns no top-level {attribute!r}"
    assert_installed(module)


def assert_installed(module: str) -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    include = project["tool"]["setuptools"]["packages"]["find"]["include"]
    package = module.split(".")[0]
    assert any(fnmatch.fnmatch(package, pattern) for pattern in include), f"pip install . does not install {package}"


def click_options(command_: click.Command) -> set[str]:
    return {name for param in command_.params for name in (*param.opts, *param.secondary_opts) if name.startswith("-")}


def assert_known_options(args: list[str], known: set[str], where: str) -> None:
    unknown = [arg for arg in args if arg.startswith("-") and arg.split("=", 1)[0] not in known]
    assert not unknown, f"{where}: options the program does not have: {unknown}"


# --- what Compose itself says about the file --------------------------------------------------------------------


def test_compose_accepts_the_file_with_only_the_required_variables(cli: ComposeCli, raw: dict[str, Any]) -> None:
    result = cli.config(SAMPLE_ENV)
    assert result.returncode == 0, f"Compose refuses docker-compose.yml:\n{result.stderr}"
    # Compose warns of a variable read with no default and not set: write ${VAR:-default} or ${VAR:?message}.
    assert "is not set" not in result.stderr, result.stderr
    assert "version" not in raw, "the top-level 'version' key is obsolete: Compose warns about it"


@pytest.mark.parametrize("name", REQUIRED_VARIABLES)
@pytest.mark.parametrize("how", ["unset", "empty"])
def test_compose_refuses_to_run_without_each_required_variable(cli: ComposeCli, name: str, how: str) -> None:
    env = {key: value for key, value in SAMPLE_ENV.items() if key != name}
    if how == "empty":
        env[name] = ""
    result = cli.config(env)
    assert result.returncode != 0, f"Compose runs with {name} {how}"
    assert f"set {name} (see .env.example)" in result.stderr, result.stderr


def read_env_example() -> dict[str, str]:
    example: dict[str, str] = {}
    for line in ENV_EXAMPLE.read_text(encoding="utf-8").splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            name, sep, value = line.partition("=")
            assert sep, f".env.example: {line!r} is not NAME=value"
            example[name.strip()] = value.strip()
    return example


def test_env_example_names_every_required_variable_and_nothing_unknown(cli: ComposeCli, raw: dict[str, Any]) -> None:
    example = read_env_example()
    for name in REQUIRED_VARIABLES:
        assert name in example and not example[name], f".env.example: list {name}, empty: each installation chooses"
    unknown = set(example) - variables_read(raw)
    assert not unknown, f".env.example sets variables the compose file never reads: {sorted(unknown)}"
    # As shipped, Compose refuses to start: each installation chooses its own secrets. The shell's win.
    assert cli.config({}, env_file=ENV_EXAMPLE).returncode != 0
    accepted = cli.config(SAMPLE_ENV, env_file=ENV_EXAMPLE)
    assert accepted.returncode == 0, accepted.stderr


# --- services and images --------------------------------------------------------------------------------------


def test_every_required_service_is_defined(compose: dict[str, Any]) -> None:
    services = set(compose["services"])
    assert services >= REQUIRED_SERVICES, f"missing services: {sorted(REQUIRED_SERVICES - services)}"


def test_postgres_and_redis_run_official_images_with_a_pinned_version(compose: dict[str, Any]) -> None:
    for name in ("postgres", "redis"):
        service = compose["services"][name]
        repository, _, tag = str(service.get("image", "")).partition(":")
        assert repository in (name, f"library/{name}", f"docker.io/library/{name}"), f"{name}: image {repository!r}"
        assert tag and tag != "latest", f"{name}: pin the image's version, not {tag!r}"
        assert "build" not in service, f"{name} runs the official image: nothing to build"


def test_app_services_run_the_image_the_dockerfile_builds(compose: dict[str, Any]) -> None:
    images = set()
    for name in APP_IMAGE_SERVICES:
        service = compose["services"][name]
        build = service.get("build")
        assert isinstance(build, dict), f"{name}: no build section"
        context = ROOT / build.get("context", ".")
        assert context.resolve() == ROOT, f"{name}: the build context is {context}, not the repository"
        assert (context / build.get("dockerfile", "Dockerfile")).resolve() == DOCKERFILE, f"{name}: builds {build}"
        images.add(service.get("image"))
        assert "working_dir" not in service or service["working_dir"] == dockerfile_workdir(), name
        assert not service.get("volumes"), f"{name}: the image is self-contained; no mounts over its code"
    assert len(images) == 1 and None not in images, f"the app services should share one image name: {images}"


def test_services_can_be_scaled(compose: dict[str, Any]) -> None:
    for name, service in compose["services"].items():
        assert "container_name" not in service, f"{name}: a fixed container_name stops `--scale` and parallel stacks"


def test_postgres_keeps_its_data_in_a_named_volume(raw: dict[str, Any], compose: dict[str, Any]) -> None:
    volumes = [str(volume) for volume in raw["services"]["postgres"].get("volumes") or []]
    data = [volume.split(":")[0] for volume in volumes if volume.split(":")[1:2] == ["/var/lib/postgresql/data"]]
    assert data, "postgres: no volume on /var/lib/postgresql/data"
    assert not data[0].startswith((".", "/", "~")), f"postgres: {data[0]!r} is a bind mount, not a named volume"
    assert data[0] in (raw.get("volumes") or {}), f"the volume {data[0]!r} is not declared under 'volumes'"
    assert environment(compose["services"]["postgres"]).get("POSTGRES_HOST_AUTH_METHOD") != "trust"


# --- the order things start in --------------------------------------------------------------------------------


def test_dependencies_and_their_conditions(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, expected in EXPECTED_DEPENDENCIES.items():
        actual = depends_on(services[name])
        wrong = {dep: actual.get(dep) for dep, condition in expected.items() if actual.get(dep) != condition}
        assert not wrong, f"{name} should wait for {expected}; it waits for {actual}"
    for name in ("postgres", "redis", "emulator"):
        assert not depends_on(services[name]), f"{name} should not wait for anything"


def test_what_a_service_waits_for_can_happen(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name, service in services.items():
        for dependency, condition in depends_on(service).items():
            target = services[dependency]
            if condition == "service_healthy":
                assert target.get("healthcheck"), f"{name} waits for {dependency} to be healthy: it has no healthcheck"
            if condition == "service_completed_successfully":
                assert str(target.get("restart", "no")) == "no", f"{dependency} must be one-shot: {name} waits for it"


def test_migrate_is_a_one_shot_and_the_rest_restart(compose: dict[str, Any]) -> None:
    services = compose["services"]
    for name in ONE_SHOT_SERVICES:
        assert str(services[name].get("restart", "no")) == "no", f"{name} runs once: restart must be 'no'"
        assert not services[name].get("ports"), f"{name} serves nothing"
    for name in LONG_RUNNING_SERVICES:
        assert services[name].get("restart") in ("unless-stopped", "always", "on-failure"), f"{name}: no restart"


# --- healthchecks ---------------------------------------------------------------------------------------------


def test_every_long_running_service_has_a_healthcheck(compose: dict[str, Any]) -> None:
    for name in LONG_RUNNING_SERVICES:
        service = compose["services"][name]
        check = service.get("healthcheck")
        assert check and not check.get("disable"), f"{name}: no healthcheck"
        kind, args = healthcheck_args(service)
        assert kind in ("CMD", "CMD-SHELL"), f"{name}: the healthcheck test must start with CMD or CMD-SHELL"
        allowed = HEALTHCHECK_PROGRAMS[image_kind(name, service)]
        assert args and args[0] in allowed, f"{name}: {args[:1]} is not in the image (it has {sorted(allowed)})"
        assert not {"curl", "wget"} & set(args), f"{name}: the image has neither curl nor wget"
        assert duration_seconds(check["timeout"]) <= duration_seconds(check["interval"]), name
        assert int(check["retries"]) >= 1, name


def _http_check(name: str, compose: dict[str, Any]) -> tuple[str, str]:
    """(the healthcheck's Python code, the URL it opens)."""
    _, args = healthcheck_args(compose["services"][name])
    assert args[:2] == ["python", "-c"], f"{name}: an HTTP check should be `python -c` with urllib, got {args}"
    code = args[2]
    urls = re.findall(r"https?://[^'\"\s]+", code)
    assert len(urls) == 1, f"{name}: the healthcheck should open one URL: {urls}"
    return code, urls[0]


@pytest.mark.parametrize("name", sorted(HTTP_HEALTH_PATHS))
def test_http_healthchecks_ask_the_service_itself(name: str, compose: dict[str, Any]) -> None:
    code, url = _http_check(name, compose)
    compile(code, f"<{name} healthcheck>", "exec")
    parts = urlsplit(url)
    assert parts.hostname in ("127.0.0.1", "localhost"), f"{name}: the check must ask its own container: {url}"
    assert parts.port == listening_port(name, compose), f"{name}: the check asks port {parts.port}"
    assert parts.path == HTTP_HEALTH_PATHS[name], f"{name}: the check asks {parts.path}"


def test_the_checked_paths_are_served() -> None:
    from flower.urls import handlers

    from api.app import app as api
    from emulator import EmulatorConfig, create_app

    assert "get" in api.openapi()["paths"].get(HTTP_HEALTH_PATHS["api"], {}), "the API serves no GET /healthz"
    emulator_paths = {getattr(route, "path", None) for route in create_app(EmulatorConfig()).routes}
    assert HTTP_HEALTH_PATHS["emulator"] in emulator_paths
    flower_patterns = [handler[0] if isinstance(handler, tuple) else handler.regex.pattern for handler in handlers]
    assert any(re.fullmatch(pattern.rstrip("$"), HTTP_HEALTH_PATHS["flower"]) for pattern in flower_patterns[:-1])


class _StubHandler(http.server.BaseHTTPRequestHandler):
    status = 200
    paths: list[str] = []  # noqa: RUF012  (reset by the fixture)

    def do_GET(self) -> None:
        type(self).paths.append(self.path)
        self.send_response(type(self).status)
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: Any) -> None:
        pass


@pytest.fixture
def stub_server() -> Iterator[http.server.ThreadingHTTPServer]:
    _StubHandler.status, _StubHandler.paths = 200, []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _StubHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def _run_check(code: str, url: str, port: int) -> int:
    parts = urlsplit(url)
    code = code.replace(f"{parts.hostname}:{parts.port}", f"127.0.0.1:{port}")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=30).returncode


@pytest.mark.parametrize("name", sorted(HTTP_HEALTH_PATHS))
def test_http_healthchecks_pass_on_200_and_fail_otherwise(
    name: str, compose: dict[str, Any], stub_server: http.server.ThreadingHTTPServer
) -> None:
    code, url = _http_check(name, compose)
    port = stub_server.server_address[1]
    assert isinstance(port, int)
    assert _run_check(code, url, port) == 0, f"{name}: the check fails although the service answers 200"
    assert _StubHandler.paths == [HTTP_HEALTH_PATHS[name]]
    _StubHandler.status = 503  # e.g. /healthz while the database does not answer
    assert _run_check(code, url, port) != 0, f"{name}: the check passes on a 503"
    assert _run_check(code, url, free_port()) != 0, f"{name}: the check passes with nothing listening"


def test_the_emulator_healthcheck_passes_against_the_emulator(
    compose: dict[str, Any], emulator: EmulatorServer
) -> None:
    code, url = _http_check("emulator", compose)
    assert _run_check(code, url, emulator.port) == 0


def test_the_worker_healthcheck_pings_this_containers_worker(compose: dict[str, Any]) -> None:
    from celery.bin.celery import celery
    from celery.bin.control import inspect

    kind, args = healthcheck_args(compose["services"]["worker"])
    worker_args = command(compose["services"]["worker"])
    assert args[0] == "celery" and "inspect" in args and "ping" in args, f"worker: {args}"
    assert option(args, "--app", "-A") == option(worker_args, "--app", "-A"), "the check must use the worker's app"
    # The worker keeps Celery's node name, celery@<hostname>, and the container's shell expands HOSTNAME.
    # `config` prints a Compose file, so that `$` is still written `$$` there.
    assert option(worker_args, "--hostname", "-n") is None
    destination = option(args, "--destination", "-d")
    assert kind == "CMD-SHELL" and destination in ("celery@$${HOSTNAME}", "celery@$$HOSTNAME"), destination
    at = args.index("inspect")
    assert_known_options(args[1:at], click_options(celery), "celery")
    assert_known_options(args[at + 1 :], click_options(inspect), "celery inspect")


# --- Flower ---------------------------------------------------------------------------------------------------


def test_flower_requires_basic_auth_from_the_environment(compose: dict[str, Any]) -> None:
    import flower.command
    from flower.options import default_options

    service = compose["services"]["flower"]
    args = command(service)
    assert option(args, "--basic-auth", "--basic_auth") is None, "the login on the command line shows in `ps`"
    assert flower.command.is_flower_envvar("FLOWER_BASIC_AUTH"), "Flower no longer reads FLOWER_BASIC_AUTH"
    # Required by the file: without FLOWER_USER or FLOWER_PASSWORD, Compose refuses to run (tested above).
    expected = f"{SAMPLE_ENV['FLOWER_USER']}:{SAMPLE_ENV['FLOWER_PASSWORD']}"
    assert environment(service).get("FLOWER_BASIC_AUTH") == expected
    at = args.index("flower")
    assert option(args[:at], "--app", "-A") == "worker.celery_app:app"
    for arg in args[at + 1 :]:
        name = arg.lstrip("-").split("=", 1)[0].replace("-", "_")
        assert hasattr(default_options, name), f"flower has no option {arg}"


def test_flower_is_published_on_this_machine_only_and_no_documented_command_has_a_password(
    cli: ComposeCli,
) -> None:
    """Flower 2.2 serves /metrics and /healthcheck without its login: its port stays on the loopback even when the
    others are published to the network, and the documented commands bind it there and keep the login off argv."""
    opened = cli.render({**SAMPLE_ENV, "PUBLISH_ADDRESS": "0.0.0.0"})["services"]
    assert [address for address, _, _ in published_ports(opened["flower"])] == ["127.0.0.1"]
    assert published_ports(opened["api"])[0][0] == "0.0.0.0"  # the variable still works elsewhere
    documents = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    flower_lines = [
        line for path in documents for line in path.read_text().splitlines() if re.search(r"\bflower\b", line)
    ]
    commands = [line for line in flower_lines if line.lstrip().startswith("celery ")]
    assert commands, "the documents show how to start Flower"
    for line in commands:
        assert "--address=127.0.0.1" in line, line
    assert not [line for line in flower_lines if "--basic-auth" in line or "--auth=" in line]


# --- ports ----------------------------------------------------------------------------------------------------


def test_published_ports_are_this_machines_by_default_and_move_with_their_variable(
    cli: ComposeCli, compose: dict[str, Any]
) -> None:
    moved_to = {variable: str(free_port()) for variable in HOST_PORT_VARIABLES.values()}
    moved = cli.render({**SAMPLE_ENV, **moved_to})["services"]
    for name, variable in HOST_PORT_VARIABLES.items():
        ports = published_ports(compose["services"][name])
        assert len(ports) == 1, f"{name}: publish exactly one port"
        address, host_port, target = ports[0]
        assert address in ("127.0.0.1", "::1"), f"{name}: by default, publish on this machine only"
        assert host_port.isdigit(), f"{name}: the default host port is {host_port!r}"
        assert target == listening_port(name, compose), f"{name}: publishes {target}, listens elsewhere"
        assert published_ports(moved[name])[0][1] == moved_to[variable], f"{name}: {variable} does not move it"
    for name in ("migrate", "worker", "postgres", "redis"):
        assert not compose["services"][name].get("ports"), f"{name} publishes nothing"


# --- Plimsoll's settings --------------------------------------------------------------------------------------


def test_every_plimsoll_service_gets_the_same_settings(compose: dict[str, Any]) -> None:
    environments = {name: plimsoll_environment(compose["services"][name]) for name in PLIMSOLL_SERVICES}
    reference = environments["worker"]
    for name, env in environments.items():
        assert env == reference, (
            f"{name}'s PLIMSOLL_ settings differ from the worker's: {set(env.items()) ^ set(reference.items())}"
        )
    assert not plimsoll_environment(compose["services"]["emulator"]), (
        "the emulator plays the provider: no Plimsoll settings"
    )


def test_every_setting_can_come_from_the_environment(cli: ComposeCli) -> None:
    from models.settings import Settings

    settings = {f"PLIMSOLL_{name.upper()}" for name in Settings.model_fields}
    given = {name: f"sentinel-{name.lower()}" for name in settings}
    services = cli.render({**SAMPLE_ENV, **given})["services"]
    for service in PLIMSOLL_SERVICES:
        env = plimsoll_environment(services[service])
        assert not settings - set(env), f"add to x-plimsoll-environment in docker-compose.yml: {settings - set(env)}"
        assert not set(env) - settings, f"not settings of models/settings.py: {sorted(set(env) - settings)}"
        ignored = sorted(name for name in settings - SETTINGS_SET_BY_COMPOSE if env[name] != given[name])
        assert not ignored, f"{service}: compose does not pass these on from the environment: {ignored}"


def test_the_settings_point_at_the_services(compose: dict[str, Any]) -> None:
    services = compose["services"]
    env = plimsoll_environment(services["worker"])
    assert env["PLIMSOLL_QUEUE"] == "celery", "steps must go through Redis to the worker service"

    database = make_url(env["PLIMSOLL_DATABASE_URL"] or "")
    postgres = environment(services["postgres"])
    assert database.drivername == "postgresql+psycopg"
    assert (database.host, database.port) == ("postgres", 5432)
    assert database.username == postgres["POSTGRES_USER"]
    assert database.password == postgres["POSTGRES_PASSWORD"] == SAMPLE_ENV["POSTGRES_PASSWORD"]
    assert database.database == postgres["POSTGRES_DB"]

    broker = urlsplit(env["PLIMSOLL_BROKER_URL"] or "")
    assert (broker.scheme, broker.hostname, broker.port) == ("redis", "redis", 6379)
    assert "--port" not in command(services["redis"]), "redis listens on 6379"

    emulator_port = listening_port("emulator", compose)
    url = urlsplit(env["PLIMSOLL_EMULATOR_URL"] or "")
    assert (url.scheme, url.hostname, url.port, url.path.rstrip("/")) == ("http", "emulator", emulator_port, "")
    for variable in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL"):  # real models: the providers' own addresses
        assert environment(services["worker"])[f"PLIMSOLL_{variable}"] is None
    assert option(command(services["emulator"]), "--host") == "0.0.0.0", "the emulator must listen beyond localhost"


def test_the_settings_are_valid_for_plimsoll(compose: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    from models.settings import Settings

    for name in [name for name in os.environ if name.startswith(("PLIMSOLL_", "ANTHROPIC_", "OPENAI_"))]:
        monkeypatch.delenv(name)
    env = plimsoll_environment(compose["services"]["api"])
    for name, value in env.items():
        if value is not None:
            monkeypatch.setenv(name, value)
    settings = Settings(_env_file=None)
    assert settings.queue == "celery"
    assert settings.database_url == env["PLIMSOLL_DATABASE_URL"]
    assert not settings.sentry_dsn, "no Sentry unless PLIMSOLL_SENTRY_DSN is set"
    assert settings.anthropic_api_key is None, "no key unless one is set: real models are refused, never emulated"
    assert settings.emulator_url == "http://emulator:8765"


# --- secrets and documentation --------------------------------------------------------------------------------


def test_no_secret_is_written_in_the_file(compose: dict[str, Any]) -> None:
    for path in (COMPOSE_FILE, DOCKERFILE, ENV_EXAMPLE):
        for kind, pattern in SECRET_PATTERNS.items():
            assert not pattern.search(path.read_text(encoding="utf-8")), f"{path.name} holds what looks like a {kind}"
    # Rendered with only the sample secrets given, the file holds no secret but those.
    samples = set(SAMPLE_ENV.values())
    for value in string_values(compose):
        for match in URL_WITH_PASSWORD.finditer(value):
            assert match["password"] in samples, f"a password written in a URL: {value}"
    for name, service in compose["services"].items():
        for variable, setting in environment(service).items():
            if SECRET_NAME.search(variable) and setting is not None:
                left = re.sub("|".join(map(re.escape, samples)), "", setting)
                assert re.fullmatch(r"[:@/]*", left), f"{name}: {variable} holds a written value {left!r}"


def test_every_variable_is_documented(raw: dict[str, Any]) -> None:
    documented = COMPOSE_DOC.read_text(encoding="utf-8")
    missing = sorted(name for name in variables_read(raw) if not re.search(rf"\b{name}\b", documented))
    assert not missing, f"document in docs/compose.md: {missing}"


# --- the commands name code that exists -----------------------------------------------------------------------


def dockerfile_instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with continuation lines joined and comments dropped."""
    instructions: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.startswith("#"):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        text = pending + stripped
        pending = ""
        keyword, _, arguments = text.partition(" ")
        instructions.append((keyword.upper(), arguments.strip()))
    assert not pending, "the Dockerfile ends in a continuation line"
    return instructions


def dockerfile_workdir() -> str:
    workdirs = [arguments for keyword, arguments in dockerfile_instructions() if keyword == "WORKDIR"]
    assert workdirs, "the Dockerfile sets no WORKDIR"
    return workdirs[-1]


def test_the_api_command(compose: dict[str, Any]) -> None:
    import importlib

    uvicorn_cli = importlib.import_module("uvicorn.main").main  # the package's `main` attribute is the function
    args = command(compose["services"]["api"])
    assert args[0] == "uvicorn", args
    context = uvicorn_cli.make_context("uvicorn", args[1:])
    assert context.params["host"] == "0.0.0.0"
    assert_defines(context.params["app"])


def test_the_worker_command(compose: dict[str, Any]) -> None:
    from celery.bin.celery import celery
    from celery.bin.worker import worker

    args = command(compose["services"]["worker"])
    assert args[0] == "celery" and "worker" in args, args
    at = args.index("worker")
    assert_known_options(args[1:at], click_options(celery), "celery")
    assert_known_options(args[at + 1 :], click_options(worker), "celery worker")
    app = option(args[:at], "--app", "-A")
    assert app is not None
    assert_defines(app)
    tree = ast.parse(module_file("worker.names").read_text(encoding="utf-8"))
    constants = {
        node.targets[0].id: node.value.value
        for node in tree.body
        if isinstance(node, ast.Assign)
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Constant)
    }
    assert option(args, "--queues", "-Q") == constants["STEP_QUEUE"], "the worker must consume the step queue"
    assert "--task-events" in args or "-E" in args, "Flower shows steps only when the worker sends task events"
    assert "--beat" in args or "-B" in args, "the reconciler runs on Celery beat: without it a lost step stays lost"
    concurrency = option(args, "--concurrency", "-c")
    assert concurrency is not None and int(concurrency) >= 1
    assert not compose["services"]["worker"].get("ports")


def test_the_migrate_command(compose: dict[str, Any]) -> None:
    from alembic.config import CommandLine

    args = command(compose["services"]["migrate"])
    assert args[:1] == ["alembic"], args
    parsed = CommandLine().parser.parse_args(args[1:])
    assert parsed.cmd[0].__name__ == "upgrade" and parsed.revision == "head"
    config_name = parsed.config or "alembic.ini"
    # The image holds the repository at its WORKDIR (COPY . . after WORKDIR), so paths there are repository paths.
    ini = ROOT / config_name
    assert ini.is_file(), f"alembic reads {config_name} from the working directory; the repository has none"
    parser = configparser.ConfigParser()
    parser.read(ini)
    location = parser.get("alembic", "script_location", raw=True).replace("%(here)s", str(ini.parent))
    assert (Path(location) / "env.py").is_file(), f"no migrations/env.py at {location}"
    assert_installed("models")


def test_the_emulator_command(compose: dict[str, Any]) -> None:
    import emulator.__main__

    args = command(compose["services"]["emulator"])
    assert args[:3] == ["python", "-m", "emulator"], args
    assert module_file("emulator.__main__").is_file()
    assert_installed("emulator")
    parsed = emulator.__main__._parser().parse_args(args[3:])
    assert parsed.host == "0.0.0.0" and parsed.port == listening_port("emulator", compose)


def test_the_flower_command(compose: dict[str, Any]) -> None:
    args = command(compose["services"]["flower"])
    assert args[0] == "celery" and "flower" in args
    app = option(args, "--app", "-A")
    assert app is not None
    assert_defines(app)


# --- the Dockerfile and .dockerignore -------------------------------------------------------------------------


def test_the_dockerfile_builds_a_slim_non_root_runtime_image() -> None:
    instructions = dockerfile_instructions()
    keywords = [keyword for keyword, _ in instructions]
    bases = [arguments.split()[0] for keyword, arguments in instructions if keyword == "FROM"]
    assert bases == ["python:3.11-slim"], f"one stage from python:3.11-slim, not {bases}"
    installs = [arguments for keyword, arguments in instructions if keyword == "RUN" and "pip install" in arguments]
    assert installs, "the Dockerfile installs nothing"
    for arguments in installs:
        assert not re.search(r"\.\[|\[(dev|bench)|--editable|\s-e\s", arguments), (
            f"dev/bench extras or editable: {arguments}"
        )
    assert any(re.search(r"pip install\s+(--\S+\s+)*\.(\s|$)", arguments) for arguments in installs), (
        "no `pip install .`"
    )

    users = [(i, arguments) for i, (keyword, arguments) in enumerate(instructions) if keyword == "USER"]
    assert users, "the image runs as root: add a USER"
    last_user_at, user = users[-1]
    assert user.split(":")[0] not in ("root", "0"), f"USER {user}"
    assert all(keyword != "RUN" for keyword in keywords[last_user_at + 1 :]), "install as root, then switch the user"

    # Layer caching: the dependencies are installed from the lock before the code is copied in.
    copy_all = next(
        i for i, (keyword, arguments) in enumerate(instructions) if keyword == "COPY" and arguments == ". ."
    )
    copy_pyproject = next(
        i for i, (keyword, arguments) in enumerate(instructions) if keyword == "COPY" and "pyproject.toml" in arguments
    )
    assert copy_pyproject < copy_all
    assert any(
        keyword == "RUN" and "pip install" in arguments for keyword, arguments in instructions[copy_pyproject:copy_all]
    ), "install the dependencies between copying pyproject.toml and copying the code"
    assert keywords.index("WORKDIR") < copy_all, "the code goes to the WORKDIR (alembic.ini is read from there)"

    for keyword, arguments in instructions:
        if keyword in ("ENV", "ARG"):
            assert not SECRET_NAME.search(arguments), f"{keyword} {arguments}: no secrets in the image"
        if keyword in ("COPY", "ADD"):
            assert ".env" not in arguments.split(), "never copy .env into the image"


def test_the_dependency_layer_installs_the_service_lock() -> None:
    """The image installs the runtime dependencies from the service's lock, hashes required, and nothing else."""
    instructions = dockerfile_instructions()
    copy = next(arguments for keyword, arguments in instructions if keyword == "COPY" and "requirements/" in arguments)
    assert "requirements/service.txt" in copy.split()
    install = next(arguments for keyword, arguments in instructions if keyword == "RUN" and "service.txt" in arguments)
    assert "--require-hashes" in install and "--no-deps" in install
    lock = (ROOT / "requirements" / "service.txt").read_text(encoding="utf-8")
    pinned = {line.split("==")[0] for line in lock.splitlines() if "==" in line and not line.startswith(" ")}
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    direct = {re.split(r"[\[<>=!~ ]", requirement)[0].lower() for requirement in project["dependencies"]}
    assert direct <= pinned, f"not in the lock: {direct - pinned}"
    for extra in ("pytest", "mypy", "langchain", "honcho"):
        assert extra not in pinned, f"{extra} is for development, not the image"


def _ignored(path: str, patterns: list[str]) -> bool:
    return any(
        fnmatch.fnmatch(path, pattern.removeprefix("**/")) or fnmatch.fnmatch(path, pattern)
        for pattern in patterns
        if not pattern.startswith("!")
    )


def test_dockerignore_keeps_local_state_out_and_the_code_in() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text(encoding="utf-8").splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for path in (".venv", ".git", "var", ".env", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache"):
        assert _ignored(path, patterns), f".dockerignore should exclude {path}"
    needed = ["pyproject.toml", "README.md", "alembic.ini", "migrations", "migrations/env.py"]
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    needed += [pattern.rstrip("*") for pattern in project["tool"]["setuptools"]["packages"]["find"]["include"]]
    for path in needed:
        assert not _ignored(path, patterns), f".dockerignore excludes {path}, which the image needs"
