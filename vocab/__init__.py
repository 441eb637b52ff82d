"""The public tokenizers, loaded from files on this machine and never downloaded: what the emulator counts with
and what the service counts exactly with (models/counting.py). It imports nothing of ours."""

from vocab.tiktoken_files import KNOWN_SHA256, TokenizerError, bundled_rank_file, load_encoding

__all__ = ["KNOWN_SHA256", "TokenizerError", "bundled_rank_file", "load_encoding"]
