"""The local three-layer context engine: pure, synchronous, its only I/O is SQLite."""

from agents.context._tokens import CLAUDE_SPLIT_PATTERN, DEFAULT_ENCODING, EncodingNotFound, Tokenizer

__all__ = ["CLAUDE_SPLIT_PATTERN", "DEFAULT_ENCODING", "EncodingNotFound", "Tokenizer"]
