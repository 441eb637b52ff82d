"""The scripts step of the fit (``estimate_fit.fit_scripts``): which texts it reads and which it holds to a margin."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from bench.samples import unseen_samples
from estimate_fit import fit_scripts
from estimate_fit.fit_scripts import MIN_CHARS, catalog_texts, in_scope

HEADER = "Content-Type: text/plain; charset=UTF-8\n"


def mo_file(messages: dict[str, str]) -> bytes:
    """A GNU message catalog (.mo) holding ``messages`` (msgid -> msgstr) and the header that names UTF-8."""
    pairs = sorted({"": HEADER, **messages}.items())
    ids, strs = [k.encode() for k, _ in pairs], [v.encode() for _, v in pairs]
    count, start = len(pairs), 7 * 4
    data_at = start + 16 * count
    table, blob = [], b""
    for item in [*ids, *strs]:
        table.append((len(item), data_at + len(blob)))
        blob += item + b"\0"
    head = struct.pack("<7I", 0x950412DE, 0, count, start, start + 8 * count, 0, data_at)
    return head + b"".join(struct.pack("<2I", *entry) for entry in table) + blob


def write_catalog(folder: Path, language: str, name: str, messages: dict[str, str]) -> None:
    target = folder / language / "LC_MESSAGES"
    target.mkdir(parents=True, exist_ok=True)
    (target / name).write_bytes(mo_file(messages))


def test_the_translated_messages_of_every_language_are_read_and_the_iso_lists_left_out(tmp_path: Path) -> None:
    georgian = unseen_samples()["georgian"]
    lines = {f"message {n}": f"{line} ({n})" for n, line in enumerate(georgian.splitlines() * 2) if line.strip()}
    write_catalog(tmp_path, "ka", "grep.mo", lines)
    write_catalog(tmp_path, "ka", "iso_3166-1.mo", {"Georgia": "საქართველო"})
    write_catalog(tmp_path, "xx", "grep.mo", {"short": "too few characters to count"})
    texts = catalog_texts(tmp_path)
    assert list(texts) == ["ka"]  # the other language has fewer than MIN_CHARS characters of messages
    assert len(texts["ka"]) >= MIN_CHARS and "საქართველო" not in texts["ka"]
    assert set(texts["ka"].splitlines()) == set(lines.values())
    assert catalog_texts(tmp_path / "absent") == {}


def test_only_text_mostly_in_a_script_the_corpus_lacks_is_held_to_the_margin() -> None:
    samples = unseen_samples()
    assert in_scope(samples["georgian"]) and in_scope(samples["armenian"]) and in_scope(samples["hindi"])
    assert not in_scope(samples["polish"])  # Latin script: mostly ASCII, the ASCII step's
    assert not in_scope("Прочитай главу и запиши один факт. " * 20)  # Cyrillic: the corpus's own script
    assert not in_scope(samples["python"])


def test_without_catalogs_the_step_changes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(fit_scripts, "LOCALES", tmp_path / "absent")
    output = tmp_path / "profiles.json"
    assert fit_scripts.run(write_to=output) == [] and not output.exists()


def test_the_ascii_fit_guards_latin_script_languages_only() -> None:
    from estimate_fit.fit_ascii import latin_script

    assert latin_script("Zażółć gęślą jaźń, powiedział programista.")
    assert latin_script("La cartella %s non contiene alcuna email.")
    assert not latin_script("Привет, мир: сообщение программы.")
    assert not latin_script("これはテストです。")
