"""Every figure traceable: each file in bench/results/ names the command that made it, a commit of this history and
a clean tree (``bench/provenance.py``); and the figures the README quotes from those files are the files' own."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from PIL import Image

from bench.provenance import CLEAN, DIRTY, HEADER, header, provenance

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
README = (ROOT / "README.md").read_text(encoding="utf-8")


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


# The README's figures against the results files they come from.


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


def keyed(table: list[list[str]]) -> list[dict[str, str]]:
    return [dict(zip(table[0], row, strict=True)) for row in table[1:]]


def cells(line: str) -> list[str]:
    return [cell.strip() for cell in line.strip().strip("|").split("|")]


def readme_table(title: str) -> list[list[str]]:
    return next(tables(section(README, title)))


def test_the_three_failures_in_the_readme_are_the_report_s() -> None:
    report = (RESULTS / "three_failures.md").read_text(encoding="utf-8")
    reported = next(tables(section(report, "1. Subagents outgrew the model")))
    assert readme_table("The three failures, through the real stack") == reported
    anxious = {row[0]: row[1] for row in next(tables(section(report, '2. A subagent stopped "to save space"')))}
    without, with_net = anxious["without"].split(" of ")[0], anxious["with the safety net"].split(" of ")[0]
    said = re.search(r"read\s+(\d+) chapters without the safety-net paragraph, and all (\d+) with it", README)
    assert said and (said[1], said[2]) == (without, with_net)


def test_the_cost_frontier_in_the_readme_is_the_report_s() -> None:
    report = (RESULTS / "cost_frontier.md").read_text(encoding="utf-8")
    reported = [row for table in tables(report) if "mean request" in table[0] for row in keyed(table)]
    for row in keyed(readme_table("The cost of keeping context")):
        with_pauses, without = (f.strip("*") for f in row["input cost ÷ uncached (with pauses / without)"].split(" / "))
        figures = {
            "mean request": row["mean request"],
            "÷ uncached, 5 min": with_pauses,
            "÷ uncached, 5 min, no pauses": without,
            "over budget": row["requests over budget"],
        }
        assert any(all(r[k] == v for k, v in figures.items()) for r in reported), f"not in cost_frontier.md: {row}"


def chaos_runs(report: str) -> dict[str, dict[str, str]]:
    """Per run ("now, Redis", "before, RabbitMQ"), the figures of its first table."""
    now, _, earlier = report.partition("\n## Earlier run\n")
    runs = {}
    for when, text, level in (("now", now, "##"), ("before", earlier, "###")):
        for broker, name in (("redis", "Redis"), ("rabbitmq", "RabbitMQ")):
            if re.search(rf"^{level} {broker}$", text, re.MULTILINE):
                runs[f"{when}, {name}"] = dict(next(tables(section(text, broker)))[1:])
    return runs


def by_state(text: str) -> dict[str, int]:
    pairs = [part.split() for part in text.split(", ")]
    return {a if b.isdigit() else b: int(b if b.isdigit() else a) for a, b in pairs}


def sentry_events(text: str) -> int:
    return 0 if text == "none" else sum(int(n) for n in re.findall(r"×(\d+)", text))


def test_the_chaos_figures_in_the_readme_are_the_report_s() -> None:
    runs = chaos_runs((RESULTS / "chaos.md").read_text(encoding="utf-8"))
    table = readme_table("Every job ends, under chaos")
    readme = {row[0]: dict(zip(table[0], row, strict=True)) for row in table[1:]}
    for run, figures in runs.items():
        assert by_state(readme["main jobs by state"][run]) == by_state(figures["main jobs, by state"]), run
        stuck_lost = f"{figures['stuck (not ended)']} / {figures['lost (no job in the database)']}"
        assert readme["jobs stuck (subagents too) / lost"][run] == stuck_lost, run
        assert readme["messages missing / duplicated"][run] == figures["messages missing / duplicated"], run
        ended = figures["last fault → every job ended"]
        assert readme["last fault → every job ended"][run] == ended, run
        assert int(readme["Sentry events"][run]) == sentry_events(figures["Sentry events by kind"]), run


def agrees(readme: list[list[str]], report: str, rename: dict[str, str] | None = None) -> bool:
    """Whether some table of ``report`` holds every row of the README's table, in every column the two share
    (README headers renamed by ``rename``; at least two shared, so that a match says something)."""
    header = [(rename or {}).get(cell, cell) for cell in readme[0]]
    for table in tables(report):
        shared = [i for i, cell in enumerate(header) if cell in table[0]]
        if len(shared) < 2:
            continue
        at = {i: table[0].index(header[i]) for i in shared}
        if all(any(all(row[i] == theirs[at[i]] for i in shared) for theirs in table[1:]) for row in readme[1:]):
            return True
    return False


def test_the_estimator_figures_in_the_readme_are_the_reports() -> None:
    reports = "\n".join((RESULTS / name).read_text(encoding="utf-8") for name in ("estimator.md", "fit_variants.md"))
    readme = list(tables(section(README, "Token estimates")))
    assert len(readme) >= 4
    for table in readme:
        assert agrees(table, reports, {"file": "text"}), f"not in estimator.md or fit_variants.md: {table[0]}"


def test_the_fleet_figures_in_the_readme_are_the_reports() -> None:
    reports = "\n".join((RESULTS / name).read_text(encoding="utf-8") for name in ("fleet.md", "fleet_resilience.md"))
    readme = list(tables(section(README, "A fleet under a provider limit")))
    assert len(readme) >= 2
    for table in readme:
        assert agrees(table, reports), f"not in fleet.md or fleet_resilience.md: {table[0]}"


def test_the_compaction_figures_in_the_readme_are_the_report_s() -> None:
    report = keyed(next(tables((RESULTS / "compaction.md").read_text(encoding="utf-8"))))
    reported = {(row["workload"], row["policy"]): row for row in report}
    workload = ""
    for row in keyed(readme_table("Compaction")):
        row = {key: value.replace("**", "") for key, value in row.items()}
        workload = row["workload, budget"].split(" (")[0] or workload
        theirs = reported[workload, row["policy"]]
        assert row["status"].split(" (")[0] == theirs["status"], row
        assert row["documents covered"] == theirs["covered"], row
        assert row["read again (tokens)"].split(" (")[0] == theirs["read again"], row
        cost, share = row["input cost (÷ uncached)"].rstrip(")").split(" (")
        assert cost == theirs["input cost"], row
        assert share == f"{float(theirs['cost vs uncached'].rstrip('%')):.0f}%", row
        assert row["compactions"] == theirs["compactions"], row
        if row["policy"] != "off":
            assert row["compaction's share of input"] == theirs["compaction share"], row
        if row["policy"] == "auto":
            assert row["summary requests read from cache"] == theirs["summary cache reads"], row
