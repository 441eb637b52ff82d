"""`make up`, as the README's five-minute journey tells a person to run it: the emulator, the migrations, the API, a
Celery worker with beat and Flower, on spare ports, a database and role of their own (created by `make up`),
a Redis database and a step queue of their own. A job submitted through the HTTP API finishes, Flower's API lists
its steps with their outcomes (and a failed job's last step as a FAILURE), headless Chromium shows them on one
screen of Flower's task list (saved as docs/flower-tasks.png), and Ctrl-C stops everything, quietly."""

from __future__ import annotations

import ast
import html
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import httpx
import pytest
from PIL import Image
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from demo.chapters import chapters
from testbed.stack import POSTGRES_URL, REDIS_URL, listening_socket, redis_database
from tests.support import wait_until as poll_until
from worker.names import RECONCILE_TASK, STEP_TASK

ROOT = Path(__file__).resolve().parents[1]
STARTUP_SECONDS = 60.0
JOB_SECONDS = 30.0
STOP_SECONDS = 30.0
TOO_LONG_LIMIT = 2_000  # the emulator's window for the third job: less than its first request
# A step queue of its own, and a Redis database no worker of the suite sends events to (the one after the suite's:
# the serial pass of `make test` runs this test after the parallel one is done): Flower sees only this run's steps.
UP_REDIS_URL = redis_database(REDIS_URL, 1)
TEXTS = {"a.txt": "Alpha is the first letter.", "b.txt": "Beta comes after alpha."}
INSTRUCTION = "Check each chapter against the notes and report one fact of each."
TENANT = "acme"  # the README's
SUBAGENT_DOCUMENTS = 12  # more than the ten the emulator's agent reads itself
ENDED = ("SUCCESS", "FAILURE", "NEEDS_NEW_CHAT")  # the states of a job's last step in Flower

# Headless Chromium on Flower's task list: a laptop's window, and the page's own script given time to fetch its rows.
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
WINDOW = (1400, 900)
PAGE_SCRIPT_MS = 10_000  # virtual time: Chromium stops as soon as the page is idle
SCREENSHOT = ROOT / "docs" / "flower-tasks.png"
# Bootstrap's badge colours in Flower 2.2: a SUCCESS and a FAILURE row are drawn on the screen, not only in the page.
SUCCESS_GREEN, FAILURE_RED = (25, 135, 84), (220, 53, 69)

# Alone (the whole service starts within STARTUP_SECONDS; UP_REDIS_URL is a worker's database in the parallel pass).
pytestmark = [pytest.mark.timeout(120), pytest.mark.worker, pytest.mark.serial]


def readme_blocks() -> tuple[str, str]:
    """The README's "Without Docker" block (`make up`) and the block run from another shell after it."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Five minutes: run the service, submit, watch, continue", 1)[1].split("\n## ", 1)[0]
    after = section.split("Without Docker", 1)[1]
    blocks = re.findall(r"```sh\n(.*?)```", after, re.DOTALL)
    assert len(blocks) >= 2, "the README's five-minute journey lost its 'Without Docker' blocks"
    return blocks[0], blocks[1]


def commands(block: str) -> list[str]:
    return [line.split("#", 1)[0].strip() for line in block.splitlines() if line.split("#", 1)[0].strip()]


def on_spare_ports(block: str, replacements: dict[str, str]) -> str:
    """The README's commands, with this test's database, ports and checkout in place of the defaults."""
    for default, own in replacements.items():
        assert default in block, f"the README no longer says {default}"
        block = block.replace(default, own)
    return block


def spare_ports(count: int) -> list[int]:
    sockets = [socket.socket() for _ in range(count)]
    for s in sockets:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in sockets]
    for s in sockets:
        s.close()
    return ports


def descendants(root: int) -> set[int]:
    """Every running process below ``root``, across sessions (honcho starts each of its processes in its own)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.add(child)
            todo.append(child)
    return found


def alive(pid: int) -> bool:
    try:
        state = (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def wait_until(what: str, check: Callable[[], Any], seconds: float, log: Path) -> Any:
    try:
        return poll_until(check, seconds, what, ignoring=(httpx.HTTPError,), every=0.3)
    except AssertionError as error:
        raise AssertionError(f"{error}; make up said:\n{log.read_text()[-4000:]}") from None


@pytest.fixture
def own_database() -> Iterator[str]:
    """The URL of a database and role that do not exist yet (`make up` creates them); both dropped afterwards."""
    name = f"plimsoll_up_{uuid.uuid4().hex[:10]}"
    server = make_url(POSTGRES_URL)
    yield server.set(username=name, password=None, database=name).render_as_string(hide_password=False)
    admin = create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as connection:
        connection.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        connection.execute(text(f'DROP ROLE IF EXISTS "{name}"'))
    admin.dispose()


def up_environment(
    database: str, ports: tuple[int, int, int], login: tuple[str, str], tmp_path: Path
) -> dict[str, str]:
    """A person's terminal, not the `make test` this suite may run under: no PLIMSOLL_ settings of the suite's, and
    no make of its own around `make up` (its MAKELEVEL would have `make up` print "Leaving directory" after
    Ctrl-C); this test's database, ports (API, Flower, emulator), Redis database and step queue."""
    inherited = ("PLIMSOLL_", "FLOWER_", "MAKELEVEL", "MAKEFLAGS", "MFLAGS")
    env = {k: v for k, v in os.environ.items() if not k.startswith(inherited) or "_TEST_" in k}
    api_port, flower_port, emulator_port = ports
    env.update(
        PLIMSOLL_DATABASE_URL=database,
        PLIMSOLL_ADMIN_USER=make_url(POSTGRES_URL).username or "postgres",
        PLIMSOLL_BROKER_URL=UP_REDIS_URL,
        PLIMSOLL_STEP_QUEUE=f"plimsoll-up-{uuid.uuid4().hex[:8]}",
        PLIMSOLL_RECONCILE_EVERY_SECONDS="1",
        PLIMSOLL_ALLOW_REPRODUCTIONS="true",  # the stopped job is not wound down, so that its last step fails
        API_PORT=str(api_port),
        FLOWER_PORT=str(flower_port),
        EMULATOR_PORT=str(emulator_port),
        API_WORKERS="1",
        WORKER_CONCURRENCY="1",
        BEAT_SCHEDULE=str(tmp_path / "celerybeat-schedule"),
        FLOWER_BASIC_AUTH=":".join(login),
    )
    return env


def test_a_second_make_up_names_the_port_in_use_and_starts_nothing(own_database: str, tmp_path: Path) -> None:
    flower_port, emulator_port = spare_ports(2)
    with listening_socket() as running:  # what the first `make up`'s API holds
        api_port = running.getsockname()[1]
        env = up_environment(own_database, (api_port, flower_port, emulator_port), ("tester", "x"), tmp_path)
        second = subprocess.run(
            ["make", "up"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=STARTUP_SECONDS
        )
    said = second.stdout + second.stderr
    assert second.returncode != 0, said
    assert f"Port {api_port} on 127.0.0.1 (API_PORT) is in use" in said, said
    assert f"API_PORT={api_port + 1} make up" in said
    assert "Plimsoll is starting" not in said and "Errno 98" not in said, said  # no banner, no process started
    admin = create_engine(make_url(POSTGRES_URL).set(database="postgres"))
    with admin.connect() as connection:  # nothing was created either
        name = make_url(own_database).database
        assert connection.scalar(text("SELECT count(*) FROM pg_database WHERE datname = :n"), {"n": name}) == 0
    admin.dispose()


def test_make_up_serves_a_job_shows_it_in_flower_and_stops_on_ctrl_c(own_database: str, tmp_path: Path) -> None:
    up_block, client_block = readme_blocks()
    assert commands(up_block) == ["make up"]
    api_port, flower_port, emulator_port = spare_ports(3)
    login = ("tester", secrets.token_hex(8))
    env = up_environment(own_database, (api_port, flower_port, emulator_port), login, tmp_path)
    log = tmp_path / "make-up.log"
    with log.open("wb") as output:
        up = subprocess.Popen(
            ["make", "up"], cwd=ROOT, env=env, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
    started: set[int] = set()
    try:
        api = httpx.Client(base_url=f"http://127.0.0.1:{api_port}", timeout=10)
        flower = httpx.Client(base_url=f"http://127.0.0.1:{flower_port}", auth=login, timeout=10)
        wait_until("the API", lambda: api.get("/healthz").status_code == 200, STARTUP_SECONDS, log)
        wait_until(
            "the emulator",
            lambda: httpx.get(f"http://127.0.0.1:{emulator_port}/v1/emulator/config").status_code == 200,
            STARTUP_SECONDS,
            log,
        )
        wait_until(
            "the worker's events in Flower",
            lambda: flower.get("/api/workers", params={"status": "true"}).json(),
            STARTUP_SECONDS,
            log,
        )
        # A round that takes nothing back is not logged (DEBUG); the scheduler says when it takes the lock.
        wait_until(
            "beat's reconciler", lambda: "this process is the scheduler now" in log.read_text(), STARTUP_SECONDS, log
        )
        started = descendants(up.pid)
        said = log.read_text()
        assert f"API       http://127.0.0.1:{api_port}" in said
        assert f"Flower    http://127.0.0.1:{flower_port}  login {login[0]} / {login[1]}" in said
        assert f"emulator   http://127.0.0.1:{emulator_port} (PLIMSOLL_EMULATOR_URL)" in said
        assert "Anthropic's models are refused: set ANTHROPIC_API_KEY" in said  # no real key set
        assert httpx.get(f"http://127.0.0.1:{flower_port}/api/tasks").status_code == 401

        # The README's next block, from another shell: a tenant, then a job submitted with the CLI until done.
        script = on_spare_ports(
            client_block,
            {
                "postgresql+psycopg://plimsoll@127.0.0.1:5432/plimsoll": own_database,
                "http://127.0.0.1:8000": f"http://127.0.0.1:{api_port}",
                ".venv/bin/": f"{ROOT}/.venv/bin/",
            },
        )
        script += 'printf %s "$PLIMSOLL_API_KEY" >api-key\n'  # the key the block exported, for the API calls below
        began = time.monotonic()
        journey = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=JOB_SECONDS + STARTUP_SECONDS,
        )
        assert journey.returncode == 0, journey.stderr[-3000:]
        done = int(journey.stdout.split()[0])  # `submit` prints the job's id first
        assert re.search(rf"^\s*{done}\s+succeeded\s", journey.stdout, re.MULTILINE), journey.stdout  # `plimsoll jobs`
        print(f"README journey: {time.monotonic() - began:.1f} s; stdout {journey.stdout[:300]!r}")

        api.headers["X-API-Key"] = (tmp_path / "api-key").read_text()
        files = [("files", (name, body.encode(), "text/plain")) for name, body in TEXTS.items()]
        documents = api.post("/v1/documents", files=files).json()["documents"]
        ids = [d["id"] for d in documents]
        # More documents than the emulator's agent reads itself: it hands them to subagents, whose rows name it
        # (done before the stopped job starts: its FAILURE row stays on the first page of Flower's list, newest first).
        many = [("files", (f"c{n:02}.txt", f"Chapter {n}.".encode(), "text/plain")) for n in range(SUBAGENT_DOCUMENTS)]
        many_ids = [d["id"] for d in api.post("/v1/documents", files=many).json()["documents"]]
        delegating = api.post("/v1/jobs", json={"instruction": INSTRUCTION, "document_ids": many_ids}).json()["id"]
        jobs = {job_id: finished(api, job_id, log) for job_id in (done, delegating)}
        stopped = api.post(
            "/v1/jobs", json={"instruction": INSTRUCTION, "document_ids": ids, "max_steps": 1, "wind_down": False}
        )
        failed = stopped.json()["id"]
        jobs[failed] = finished(api, failed, log)
        assert jobs[done]["status"] == "succeeded"
        assert jobs[failed]["status"] == "failed"
        assert jobs[delegating]["status"] == "succeeded" and jobs[delegating]["children"], jobs[delegating]
        # The model's window shrinks below the request: the job ends at its plimsoll line, needing a new chat.
        emulator = f"http://127.0.0.1:{emulator_port}/v1/emulator/config"
        httpx.post(emulator, json={"limit": TOO_LONG_LIMIT}).raise_for_status()
        long_texts = [{"name": c.name, "content": c.text} for c in chapters(3, chars=6_000, languages=("en",))]
        long_ids = [api.post("/v1/documents", json=body).json()["documents"][0]["id"] for body in long_texts]
        job = api.post(
            "/v1/jobs",
            json={"instruction": INSTRUCTION, "document_ids": long_ids, "budget": 30_000, "strategy": "legacy"},
        )
        too_long = job.json()["id"]
        jobs[too_long] = finished(api, too_long, log)
        assert jobs[too_long]["status"] == "needs_new_chat"
        [notice] = api.get("/v1/notices", params={"job_id": too_long}).json()["items"]
        assert f"plimsoll continue {too_long}" in notice["text"]
        # The model's window is back; the person goes on in a new chat, as the notice says.
        httpx.post(emulator, json={"limit": 1_000_000}).raise_for_status()
        cli = {**env, "PLIMSOLL_API_URL": str(api.base_url), "PLIMSOLL_API_KEY": api.headers["X-API-Key"]}
        going_on = subprocess.run(
            [f"{ROOT}/.venv/bin/plimsoll", "continue", str(too_long), "-i", "Note each chapter.", "--wait"],
            env=cli,
            capture_output=True,
            text=True,
            timeout=JOB_SECONDS + STARTUP_SECONDS,
        )
        assert going_on.returncode == 0, going_on.stderr[-3000:]
        assert api.get(f"/v1/jobs/{int(going_on.stdout.split()[0])}").json()["continued_from"] == too_long

        def tasks_of(job_id: int) -> list[dict[str, Any]]:
            listed = flower.get("/api/tasks", params={"taskname": STEP_TASK}).json().values()
            ours = (t for t in listed if t["args"].startswith(f"job {job_id}, step "))
            return sorted(ours, key=lambda t: t["received"])

        shown = wait_until(
            "every job's last step in Flower",
            lambda: all(tasks_of(j) and tasks_of(j)[-1]["state"] in ENDED for j in jobs) and jobs,
            JOB_SECONDS,
            log,
        )
        for job_id, job in shown.items():
            tasks = tasks_of(job_id)
            last_step = job["last_request"]["step"]
            print(f"Flower's tasks of job {job_id} ({job['status']}):")
            for task in tasks:
                print("  ", {k: task[k] for k in ("state", "args", "result", "exception")})
            *earlier, last = tasks
            for task in earlier:
                assert task["state"] == "SUCCESS"
                assert task["result"].startswith("{'status': ")  # Flower cuts the column: the status first
                outcome = ast.literal_eval(task["result"])
                assert outcome["job_id"] == job_id and {"step", "status"} <= outcome.keys()
                assert task["args"].endswith(f" (tenant {TENANT}, on the emulator)")
                if outcome["action"] == "waiting":  # a main job's step waiting for its subagents: nothing sent
                    continue
                assert "stage" in outcome
                # the step the API numbers so, and whose job it is
                assert task["args"] == f"job {job_id}, step {outcome['step']} (tenant {TENANT}, on the emulator)"
            if job["status"] == "succeeded":
                outcome = ast.literal_eval(last["result"])
                assert last["state"] == "SUCCESS"
                assert (outcome["step"], outcome["status"], outcome["action"]) == (last_step, "succeeded", "finished")
                assert outcome["estimated_tokens"] > 0 and outcome["reported_tokens"] > 0
            elif job["status"] == "needs_new_chat":  # too long: a limit of the model, neither success nor failure
                outcome = ast.literal_eval(last["result"])
                assert last["state"] == "NEEDS_NEW_CHAT"
                assert (outcome["step"], outcome["status"]) == (last_step, "needs_new_chat")
            else:
                assert last["state"] == "FAILURE"
                assert last["exception"].startswith("JobFailed(")
                assert f"job {job_id} failed at step {last_step}: stopped after 1 step, the limit" in last["exception"]
        for child in jobs[delegating]["children"]:
            rows = wait_until(f"subagent {child['id']} in Flower", partial(tasks_of, child["id"]), JOB_SECONDS, log)
            whose = f"(subagent of job {delegating}, tenant {TENANT}, on the emulator)"
            assert all(task["args"].endswith(whose) for task in rows), rows
        # Beat sent the reconciler every second all along: none of its runs is a row of the task list.
        assert flower.get("/api/tasks", params={"taskname": RECONCILE_TASK}).json() == {}
        page = flower.get("/tasks").text
        headers = re.findall(r'<th data-column="([a-z_]+)">', page)
        assert {"args", "result", "exception", "state"} <= set(headers), headers

        # Flower's task list as a person sees it, in a laptop's window.
        shot = tmp_path / "flower-tasks.png"
        url = f"http://{login[0]}:{login[1]}@127.0.0.1:{flower_port}/tasks"
        began = time.monotonic()
        columns, rows = task_list_in_chromium(url, shot)
        print(f"Flower's task list in headless Chromium: {time.monotonic() - began:.1f} s, {len(rows)} rows")
        assert columns == flower_columns(), "Flower does not show the Procfile's columns"
        assert columns[:4] == ["args", "state", "result", "exception"], columns  # what a person reads first
        shown_args = rf"job \d+, step \d+ \((subagent of job \d+, )?tenant {TENANT}, on the emulator\)"
        assert rows and all(re.fullmatch(shown_args, row["args"]) for row in rows), rows
        assert all(row["name"] == STEP_TASK for row in rows), rows  # no reconciler
        assert all(row["result"].startswith("{'status': ") for row in rows if row["state"] == "SUCCESS"), rows
        [stopped_row] = [row for row in rows if row["state"] == "FAILURE"]
        assert stopped_row["args"].startswith(f"job {failed}, step ")
        assert "stopped after 1 step, the limit of this job" in stopped_row["exception"]
        with Image.open(shot) as image:
            assert image.size == WINDOW
            colours = {colour for _, colour in image.convert("RGB").getcolors(maxcolors=WINDOW[0] * WINDOW[1]) or []}
        assert len(colours) > 100, "the screenshot is nearly blank"
        assert {SUCCESS_GREEN, FAILURE_RED} <= colours, "no SUCCESS and FAILURE rows on the screen"
        if os.environ.get("PLIMSOLL_WRITE_DOCS"):  # the picture docs/running.md and docs/compose.md show, on request
            shutil.copyfile(shot, SCREENSHOT)
    finally:
        if up.poll() is None:
            os.killpg(up.pid, signal.SIGINT)  # Ctrl-C in the terminal `make up` runs in
        try:
            up.wait(timeout=STOP_SECONDS)
        finally:
            left = [pid for pid in started | descendants(up.pid) if alive(pid)]
            for pid in left:
                os.kill(pid, signal.SIGKILL)
    assert started, "no process was seen running"
    assert left == [], f"still running after Ctrl-C: {left}"
    # Ctrl-C ends with one line, not make's "Error 130"; make itself, interrupted too, ends as a Ctrl-C'd command
    # does (killed by the signal, which a shell does not report), or with scripts/up.sh's 0.
    said = log.read_text()
    assert "Error 130" not in said and "make: ***" not in said, said[-2000:]
    assert said.rstrip().endswith("Plimsoll stopped (Ctrl-C): the emulator, the API, the worker and Flower are down.")
    assert up.returncode in (0, -signal.SIGINT), up.returncode
    for port in (api_port, flower_port, emulator_port):
        with socket.socket() as probe:
            assert probe.connect_ex(("127.0.0.1", port)) != 0, f"port {port} still answers"


def finished(api: httpx.Client, job_id: int, log: Path) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        job: dict[str, Any] = api.get(f"/v1/jobs/{job_id}").json()
        return job if job["status"] not in ("queued", "running") else None

    result: dict[str, Any] = wait_until(f"job {job_id}", done, JOB_SECONDS, log)
    return result


def flower_columns() -> list[str]:
    """The task list's columns as the Procfile starts Flower with them, checked against docker-compose.yml's."""
    [procfile] = re.findall(r"--tasks_columns=([a-z_,]+)", (ROOT / "Procfile").read_text())
    [compose] = re.findall(r"--tasks_columns=([a-z_,]+)", (ROOT / "docker-compose.yml").read_text())
    assert procfile == compose, "the Procfile and docker-compose.yml show Flower's task list differently"
    return str(procfile).split(",")


def task_list_in_chromium(url: str, png: Path) -> tuple[list[str], list[dict[str, str]]]:
    """Headless Chromium opens Flower's task list, lets its script fetch the rows, saves a screenshot of the window
    in ``png`` and returns the columns and the rows it drew (first page), each row's cells by column."""
    assert CHROMIUM, "no Chromium here: `make test` installs it when run as root (apt-get install chromium)"
    drawn = subprocess.run(
        [
            CHROMIUM,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            f"--user-data-dir={png.parent / 'chromium-profile'}",
            f"--window-size={WINDOW[0]},{WINDOW[1]}",
            f"--virtual-time-budget={PAGE_SCRIPT_MS}",
            f"--screenshot={png}",
            "--dump-dom",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert drawn.returncode == 0 and png.is_file(), drawn.stderr[-2000:]
    page = drawn.stdout
    # DataTables draws the header twice (the scrolling head and the body's sizing row): the first set is the one shown.
    headers = re.findall(r'<th[^>]*data-column="([a-z_]+)"', page)
    columns = headers[: len(headers) // 2]
    body = page.split("<tbody", 1)[1].split("</tbody>", 1)[0]
    rows = []
    for row in re.findall(r"<tr[^>]*>(.*?)</tr>", body, re.DOTALL):
        cells = [
            html.unescape(re.sub(r"<[^>]+>", "", cell)).strip()
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row, re.DOTALL)
        ]
        rows.append(dict(zip(columns, cells, strict=True)))
    return columns, rows
