"""The benchmarks' plots (bench/results/*.png) served beside the benchmark pages, which include their reports
(bench/results/*.md, pymdownx.snippets) with the plots' relative links as the reports write them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.structure.files import File, Files

RESULTS = Path(__file__).resolve().parents[1] / "bench" / "results"


def on_files(files: Files, config: Any) -> Files:
    for plot in sorted(RESULTS.glob("*.png")):
        files.append(File.generated(config, f"benchmarks/{plot.name}", abs_src_path=str(plot)))
    return files
