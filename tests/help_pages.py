"""Prints the ``--help`` of each command named on the command line (a JSON list of word lists), as
``python -m cli <words> --help`` prints it, each followed by a form feed line: one process for every page."""

from __future__ import annotations

import json
import sys

from cli.main import app

PAGE_END = "\f\n"


def main(paths: list[list[str]]) -> None:
    for path in paths:
        try:
            app(prog_name="plimsoll", args=[*path, "--help"])  # as cli/__main__.py runs it
        except SystemExit as ended:
            if ended.code not in (0, None):
                raise
        sys.stdout.write(PAGE_END)
        sys.stdout.flush()


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
