"""Running the service: the API, a worker, Celery beat, the migrations."""

from __future__ import annotations

from typing import Annotated

import typer

from cli.common import Json, consoles, print_json, require_database_setting, table

app = typer.Typer()


@app.command("api")
def serve(
    host: Annotated[str, typer.Option(help="The address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=1, max=65535, help="The port to listen on.")] = 8000,
) -> None:
    """Serve the HTTP API (uvicorn, api.app:app) on the settings' database."""
    import uvicorn

    uvicorn.run("api.app:app", host=host, port=port, proxy_headers=True)


@app.command()
def worker(
    concurrency: Annotated[int, typer.Option(help="Steps run at the same time in this worker.")] = 2,
    loglevel: Annotated[str, typer.Option(help="Celery's log level.")] = "info",
    beat: Annotated[
        bool, typer.Option(help="Also run the reconciler's schedule (Celery beat) in this worker: one per service.")
    ] = False,
    hostname: Annotated[
        str | None,
        typer.Option(
            help="The worker's node name (Celery's default: celery@HOST); two workers on one machine "
            "need different ones, e.g. w1@%h and w2@%h."
        ),
    ] = None,
) -> None:
    """Run a Celery worker that takes job steps from the broker."""
    require_database_setting("a worker")
    from worker.celery_app import app as celery

    queue = celery.conf.task_default_queue
    options = ["-Q", queue, "-E", f"--concurrency={concurrency}", f"--loglevel={loglevel}"]
    options += [f"--hostname={hostname}"] if hostname else []
    celery.worker_main(["worker", *options, *(["--beat"] if beat else [])])


@app.command()
def beat(loglevel: Annotated[str, typer.Option(help="Celery's log level.")] = "info") -> None:
    """Run Celery beat: every few seconds it asks a worker to queue again the jobs whose deadline passed."""
    require_database_setting("beat")
    from worker.celery_app import app as celery

    celery.start(["beat", f"--loglevel={loglevel}"])


@app.command()
def migrate(as_json: Json = False) -> None:
    """Bring the database (PLIMSOLL_DATABASE_URL) to the newest schema."""
    from models.migrate import current_revision, upgrade
    from models.settings import get_settings

    url = get_settings().database_url
    upgrade(url)
    consoles()[1].print("The database is up to date.")
    if as_json:
        print_json({"revision": current_revision(url)})


@app.command()
def routes(as_json: Json = False) -> None:
    """Where each provider's models go, with which key, and from which setting each came (the settings of this
    shell: run it where the worker runs). Real keys are shown by their first and last characters only."""
    from dataclasses import asdict

    from models.endpoints import routes as provider_routes
    from models.settings import get_settings

    found = provider_routes(get_settings())
    if as_json:
        print_json([asdict(route) for route in found])
        return
    grid = table("provider", "address", "key")
    for route in found:
        grid.add_row(route.provider, f"{route.endpoint} ({route.endpoint_from})", f"{route.key} ({route.key_from})")
    consoles()[0].print(grid)
