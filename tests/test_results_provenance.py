"""Every figure traceable: each file in bench/results/ names the command that made it, a commit of this history and
a clean tree (``bench/provenance.py``); the benchmark pages of the documentation include those files rather than
copy their tables; and the figures the README and the pages quote from them are the files' own."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from bench.goals import RECOVERY_GOAL_SECONDS
from bench.provenance import CLEAN, DIRTY, HEADER, header, provenance

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
README = (ROOT / "README.md").read_text(encoding="utf-8")
BENCHMARK_PAGES = ROOT / "docs" / "benchmarks"


def stated_header(path: Path) -> str:
    if path.suffix == ".png":
        with Image.open(path) as image:
            return str(image.info.get("Description", ""))
    return path.read_text(encoding="utf-8")


def in_git_checkout() -> bool:
    return shutil.which("git") is not None and (ROOT / ".git").exists()


@pytest.mark.parametrize("path", sorted(RESULTS.iterdir()), ids=lambda p: p.name)
def test_every_results_file_names_its_command_a_commit_of_this_history_and_a_clean_tree(path: Path) -> None:
    found = HEADER.search(stated_header(path))
    assert found, f"{path.name} does not say which command and commit made it (bench/provenance.py)"
    assert found["command"].startswith("python -m bench.")
    assert found["tree"] == CLEAN, f"{path.name} was made with uncommitted changes: make it again on a clean tree"
    if in_git_checkout():
        ancestor = subprocess.run(
            ["git", "-C", str(ROOT), "merge-base", "--is-ancestor", found["commit"], "HEAD"], check=False
        )
        assert ancestor.returncode == 0, f"{path.name} names {found['commit']}, which is not in this history"


def test_the_header_says_whether_the_tree_was_clean(tmp_path: Path) -> None:
    if shutil.which("git") is None:
        pytest.skip("no git here")

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()

    git("init", "-q")
    (tmp_path / "code.py").write_text("x = 1\n")
    git("add", "-A")
    git("commit", "-qm", "one")
    commit = git("rev-parse", "HEAD")
    assert header("python -m bench.x", tmp_path) == f"Made by `python -m bench.x` on commit {commit} ({CLEAN})."
    (tmp_path / "bench" / "results").mkdir(parents=True)
    (tmp_path / "bench" / "results" / "x.md").write_text("a run's own output\n")
    assert provenance(tmp_path).clean  # what the run writes is not a change to the code
    (tmp_path / "code.py").write_text("x = 2\n")
    assert header("python -m bench.x", tmp_path).endswith(f"({DIRTY}).")
    assert provenance(tmp_path).short == f"{commit[:7]} + {DIRTY}"


# The README's headline figures, and the benchmark pages, against the results files they come from.


def section(text: str, title: str) -> str:
    """The text under the heading ``title`` (any level), up to the next heading of that level or above."""
    found = re.search(rf"^(#+) {re.escape(title)}\n", text, re.MULTILINE)
    assert found, f"no section {title!r}"
    level = len(found[1])
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(text, found.end())
    return text[found.end() : end.start() if end else len(text)]


def tables(text: str) -> Iterator[list[list[str]]]:
    """Every Markdown table of ``text``: its header's cells, then each row's."""
    lines = text.splitlines()
    for i, line in enumerate(lines[:-1]):
        starts = line.startswith("|") and (i == 0 or not lines[i - 1].startswith("|"))
        if starts and re.fullmatch(r"\|(\s*:?-+:?\s*\|)+", lines[i + 1]):
            rows = [cells(line)]
            for row in lines[i + 2 :]:
                if not row.startswith("|"):
                    break
                rows.append(cells(row))
            yield rows


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def figures(text: str) -> set[str]:
    """The numbers of ``text`` as written (``1,775,701``, ``0.395``, ``38.4``), link targets left out."""
    prose = re.sub(r"\]\([^)]*\)", "]", text)
    return set(re.findall(r"(?<![\w.,])\d+(?:[.,]\d+)*", prose))


def written(number: str, report: str) -> bool:
    return re.search(rf"(?<![\w.,]){re.escape(number)}(?![\d]|[.,]\d)", report) is not None


HEADLINES = [item for item in re.split(r"\n- ", section(README, "What it guarantees, measured")) if "](bench/" in item]


@pytest.mark.parametrize("headline", HEADLINES, ids=lambda item: re.sub(r"\W+", "-", item.split("**")[1]).strip("-"))
def test_every_figure_of_the_readme_s_headlines_is_in_the_results_file_it_links(headline: str) -> None:
    linked = re.findall(r"\]\((bench/results/[\w.]+\.md)\)", headline)
    assert linked, "a headline that quotes figures links the results file they come from"
    reports = "\n".join((ROOT / path).read_text(encoding="utf-8") for path in linked)
    missing = sorted(number for number in figures(headline) if not written(number, reports))
    assert missing == [], f"not in {', '.join(linked)}: {missing}"


def test_the_readme_has_a_headline_for_every_report() -> None:
    linked = {name for item in HEADLINES for name in re.findall(r"bench/results/(\w+)\.md", item)}
    assert len(HEADLINES) >= 6
    assert linked >= {"chaos", "three_failures", "estimator", "cost_frontier", "compaction", "fleet"}


INCLUDED = {
    "chaos.md": ["chaos"],
    "budgets.md": ["budgets"],
    "push.md": ["events", "webhooks"],
    "three-failures.md": ["three_failures"],
    "estimates.md": ["estimator", "fit_variants"],
    "cost.md": ["cost_frontier"],
    "compaction.md": ["compaction"],
    "storage.md": ["storage"],
    "fleet.md": ["fleet", "fleet_resilience"],
    "worker.md": ["worker_overhead"],
    "retention.md": ["retention"],
    "throughput.md": ["fleet_throughput"],
}


@pytest.mark.parametrize("page", sorted(INCLUDED))
def test_a_benchmark_page_includes_its_reports_and_copies_none_of_their_tables(page: str) -> None:
    text = (BENCHMARK_PAGES / page).read_text(encoding="utf-8")
    for name in INCLUDED[page]:
        assert f'--8<-- "bench/results/{name}.md"' in text, f"{page} does not include bench/results/{name}.md"
    reported = {
        tuple(row)
        for path in RESULTS.glob("*.md")
        for table in tables(path.read_text(encoding="utf-8"))
        for row in table[1:]
    }
    copied = [row for table in tables(text) for row in table[1:] if tuple(row) in reported]
    assert copied == [], f"{page} copies rows of a report: include the report instead"


def test_every_report_is_included_by_a_benchmark_page() -> None:
    included = {name for names in INCLUDED.values() for name in names}
    assert included == {path.stem for path in RESULTS.glob("*.md")}


def test_the_three_failures_page_quotes_the_report_s_safety_net_figures() -> None:
    report = (RESULTS / "three_failures.md").read_text(encoding="utf-8")
    anxious = {row[0]: row[1] for row in next(tables(section(report, '2. A subagent stopped "to save space"')))}
    without, with_net = anxious["without"].split(" of ")[0], anxious["with the safety net"].split(" of ")[0]
    page = (BENCHMARK_PAGES / "three-failures.md").read_text(encoding="utf-8")
    said = re.search(r"read\s+(\d+) chapters without the safety-net paragraph, and all (\d+) with it", page)
    assert said and (said[1], said[2]) == (without, with_net)


def test_the_storage_page_quotes_the_report_s_ratios() -> None:
    report = (RESULTS / "storage.md").read_text(encoding="utf-8")
    page = (BENCHMARK_PAGES / "storage.md").read_text(encoding="utf-8")
    measured = re.findall(r"\| (\d+\.\d+)× \(as rows (\d+\.\d+)×; inline (\d+\.\d+)×\) \|", report)
    assert len(measured) == 2
    for at_rest, as_rows, inline in measured:
        assert f"{at_rest}×" in page and f"{as_rows}×" in page and f"{float(inline):.1f}×" in page


def test_the_readme_and_the_pages_quote_the_one_recovery_goal() -> None:
    """Fleet's worker kill and chaos hold to one recovery goal (``bench/goals.py``); wherever the README or a page
    states a recovery goal, it is that one."""
    pattern = re.compile(r"(?:goal:?|hold it to|must end within) (?:≤ )?(\d+) s")
    quoted = {
        (path.name, int(seconds))
        for path in [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
        for seconds in pattern.findall(" ".join(path.read_text(encoding="utf-8").split()))
    }
    assert {name for name, _ in quoted} >= {"README.md", "index.md", "worker.md", "fleet.md", "chaos.md"}, quoted
    assert {seconds for _, seconds in quoted} == {RECOVERY_GOAL_SECONDS}, quoted
