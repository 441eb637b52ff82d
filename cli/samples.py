"""samples: small chapters to try Plimsoll on, written into a folder (the README's quick start uses them)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from cli.common import Json, consoles, plain, print_json

app = typer.Typer()


@app.command()
def samples(
    folder: Annotated[Path, typer.Argument(file_okay=False, help="Where the chapters go (made if missing).")],
    count: Annotated[int, typer.Option(min=1, max=500, help="How many chapters.")] = 6,
    chars: Annotated[int, typer.Option(min=100, max=2_000_000, help="Characters per chapter, about.")] = 3_000,
    as_json: Json = False,
) -> None:
    """Write COUNT small chapters in English, Russian, Chinese and Japanese into FOLDER, as UTF-8 text files
    (made by the project's generator: the same files on every machine). Then: plimsoll submit FOLDER/*.txt."""
    from demo.chapters import chapters

    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for chapter in chapters(count, chars=chars, prefer_corpus=False):
        path = folder / chapter.name
        path.write_text(chapter.text, encoding="utf-8")
        written.append(str(path))
    if as_json:
        print_json(written)
    else:
        plain(
            consoles()[1], f"{len(written)} chapters written to {folder}/: {', '.join(Path(p).name for p in written)}"
        )
