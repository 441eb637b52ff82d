"""Notices that tell the truth: a budget too small for the work says so (not "too long, start a new chat"); a
hand-over says why the new chat started; numbers and plural forms follow the person's locale (CLDR, via Babel);
an unknown locale is refused where it is given."""

from __future__ import annotations

import re

import pytest
from fastapi.testclient import TestClient
from sqlalchemy import select
from typer.testing import CliRunner

from api.app import create_app
from cli.main import app as cli
from emulator import EmulatorServer
from models.db import Database
from models.tables import Job, JobStatus, Notice
from plimsoll.handover import handover
from plimsoll.notices import (
    CONTINUE_HINTS,
    LANGUAGES,
    STOPPED_NOTICES,
    TOO_LONG_NOTICES,
    check_locale,
    stopped_notice,
)
from tests.fixtures_emulator import TEST_API_KEY
from tests.support_api import new_tenant
from tests.support_worker import run_to_end, services, submit
from worker.providers import AnthropicProvider

NBSP = "\xa0"


@pytest.mark.parametrize(
    ("locale", "steps", "expected"),
    [
        ("en", 1, "after 1 step,"),
        ("en", 2, "after 2 steps,"),
        ("en", 1000, "after 1,000 steps,"),
        ("cs", 1, "po 1 kroku,"),
        ("cs", 3, "po 3 krocích,"),
        ("cs", 5, "po 5 krocích,"),
        ("cs-CZ", 1000, f"po 1{NBSP}000 krocích,"),
    ],
)
def test_the_step_limit_notice_has_the_plural_form_and_numbers_of_the_locale(
    locale: str, steps: int, expected: str
) -> None:
    assert expected in stopped_notice("steps", locale, steps=steps)


def test_czech_numbers_group_with_a_no_break_space_not_a_comma() -> None:
    assert f"50{NBSP}000 vstupních tokenů" in stopped_notice("tokens", "cs", tokens=50_000)
    too_small = stopped_notice("budget", "cs", budget=1_000, needed=2_500)
    assert f"1{NBSP}000 tokenů na požadavek" in too_small and f"alespoň 2{NBSP}500 tokenů" in too_small
    assert "budget of 1,000 tokens" in stopped_notice("budget", "en", budget=1_000, needed=2_500)


def test_every_notice_is_written_in_every_language_with_the_same_placeholders() -> None:
    def names(forms: str | dict[str, str]) -> set[frozenset[str]]:
        texts = forms.values() if isinstance(forms, dict) else [forms]
        return {frozenset(re.findall(r"\{(\w+)\}", text)) for text in texts}

    english = STOPPED_NOTICES["en"]
    for language in LANGUAGES:
        assert STOPPED_NOTICES[language].keys() == english.keys(), language
        for why, forms in STOPPED_NOTICES[language].items():
            assert names(forms) == names(english[why]), (language, why)
    assert TOO_LONG_NOTICES.keys() == CONTINUE_HINTS.keys() == set(LANGUAGES)


def test_an_unknown_locale_is_refused_naming_the_known_ones() -> None:
    assert check_locale("cs-CZ") == "cs-CZ"
    for unknown in ("xx", "de", "cs-XX"):
        with pytest.raises(ValueError, match=f"unknown locale '{unknown}': notices are written in en, cs"):
            check_locale(unknown)


def test_the_api_and_the_cli_refuse_an_unknown_locale(database: Database) -> None:
    _, key = new_tenant(database)
    with TestClient(create_app(database=database, enqueue=lambda _job: None), headers={"X-API-Key": key}) as client:
        for route in ("/v1/jobs", "/v1/jobs/check"):
            refused = client.post(route, json={"instruction": "Read.", "locale": "xx"})
            assert refused.status_code == 422, refused.text
            assert refused.json()["detail"].startswith("locale: unknown locale 'xx': notices are written in en")
            assert refused.json()["errors"][0]["msg"].startswith("unknown locale 'xx'")  # without "Value error, "
    outcome = CliRunner().invoke(cli, ["submit", __file__, "-i", "Read.", "--locale", "xx", "--api-key", key])
    assert outcome.exit_code == 2 and "Error: --locale: unknown locale 'xx': notices are" in outcome.stderr


def written(status: str) -> str:
    return handover(
        job_id=7, instruction="Check the chapters.", produced=["NOTE a.txt"], unread=[], next_step="Go on.",
        max_tokens=10_000, max_chars=20_000, profile="cl100k", status=status,
    ).text  # fmt: skip


def test_a_hand_over_says_how_the_old_job_ended_in_our_own_words() -> None:
    assert written("needs_new_chat").startswith("This continues job 7, which grew too long for the model.")
    assert written("succeeded").startswith("This continues job 7, which finished. It was asked:")
    assert "grew too long" not in written("succeeded")
    assert written("failed").startswith("This continues job 7, which stopped before it finished. It was asked:")


def test_a_budget_too_small_for_the_first_round_says_so_instead_of_too_long(
    database: Database, emulator_reset: EmulatorServer
) -> None:
    # The instruction fits the budget alone, but not with the first tool result: a new chat, which repeats the
    # instruction in its hand-over, would not fit either. The case: --budget 1000, a long instruction.
    provider = AnthropicProvider(api_key=TEST_API_KEY, base_url=emulator_reset.base_url)
    texts = {f"{n}.txt": f"Text number {n}. " * 100 for n in range(3)}
    instruction = "Check each document carefully and note the dates. " * 8
    job_id = submit(database, texts, enqueue=False, budget=1_000, instruction=instruction)
    run_to_end(job_id, services(database, provider, []))
    with database.session() as session:
        job = session.get_one(Job, job_id)
        notices = list(session.scalars(select(Notice.text).where(Notice.job_id == job_id)))
    assert job.status == JobStatus.FAILED, job.error
    named = re.search(r"\(([\d,]+) would hold them\)$", job.error or "")
    assert named and (job.error or "").startswith(
        "the budget of 1,000 tokens is too small for the job's first message with its notes and one round of tool "
        "results"
    )
    assert notices == [stopped_notice("budget", "en", budget=1_000, needed=int(named[1].replace(",", "")))]
