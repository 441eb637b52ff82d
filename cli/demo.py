"""The demo: the main job on the embedded defaults, no services needed."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from cli.common import Json, print_json
from models.statuses import JobStatus

if TYPE_CHECKING:
    from rich.table import Table

    from demo.run import DemoReport
    from demo.run import Progress as DemoProgress

app = typer.Typer()


@app.command()
def demo(
    folder: Annotated[Path, typer.Option(help="Where the demo's SQLite database goes.")] = Path("var"),
    chapters: Annotated[int, typer.Option(min=2, help="How many chapters the subagent checks.")] = 40,
    chars: Annotated[int, typer.Option(min=1_000, help="Characters per chapter.")] = 45_000,
    budget: Annotated[int, typer.Option(min=10_000, help="Input tokens per request.")] = 400_000,
    as_json: Json = False,
) -> None:
    """Check 40 long multilingual chapters with a subagent, under a budget far below their total: no services
    needed (SQLite, an in-process worker and the bundled model emulator)."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from demo.run import run_demo

    folder.mkdir(parents=True, exist_ok=True)
    console = Console(stderr=True) if as_json else Console()  # with --json, the progress goes to standard error
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=False) as bar:
        task = bar.add_task("chapters read", total=chapters)

        def show(progress: DemoProgress) -> None:
            request = f"{progress.last_request:,}" if progress.last_request else "-"
            bar.update(
                task,
                completed=progress.chapters_read,
                description=f"step {progress.step:>3} · last request {request} tokens · {progress.cleared} cleared",
            )

        report = run_demo(folder, count=chapters, chars=chars, budget=budget, on_progress=show)
    if as_json:
        print_json(asdict(report))
    else:
        console.print(summary(report))
    if report.status != JobStatus.SUCCEEDED or report.chapters_read != report.chapters:
        raise typer.Exit(1)


def summary(report: DemoReport) -> Table:
    from rich.table import Table

    table = Table(show_header=False)  # as the README shows it: no title to wrap, no empty header row
    table.add_column()
    table.add_column(justify="right")
    rows = [
        ("job", report.status),
        ("chapters read and noted correctly", f"{report.chapters_read} of {report.chapters}"),
        ("all chapters together (real tokens)", f"{report.total_tokens:,}"),
        ("requests", f"{report.requests}"),
        ("largest request (real tokens)", f"{report.max_request:,}"),
        ("budget per request", f"{report.budget:,}"),
        ("model's hard limit", f"{report.limit:,}"),
        ("largest estimate (before calibration)", f"{report.max_estimate:,}"),
        ("results cleared in one request, at most", f"{report.cleared_at_most}"),
        ("stage reached", report.stage_reached),
        ("cache-read share of input", f"{report.cache_read_share:.0%}"),
        ("input cost vs uncached", f"{report.cost_vs_uncached:.2f}"),
        ("time in our code per step", f"{report.overhead_ms_per_step:.1f} ms"),
        ("wall time", f"{report.seconds} s"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    return table
