"""Files that are not what a command expects are refused with a clear error."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxbus.agents.context import StoreError
from ctxbus.agents.runtime import TranscriptError, inspect_store, replay_transcript
from ctxbus.schemas import Domain, UsageError


def test_inspecting_a_file_that_is_not_a_store_is_a_store_error(tmp_path: Path) -> None:
    not_sqlite = tmp_path / "notes.txt"
    not_sqlite.write_text("root:x:0:0:root:/root:/bin/bash\n" * 50)
    with pytest.raises(StoreError, match=f"context store '{not_sqlite}' is not a SQLite database"):
        inspect_store(not_sqlite, Domain.parse("a/b/c"))


def test_replaying_a_transcript_that_is_not_utf8_is_a_transcript_error(tmp_path: Path) -> None:
    binary = tmp_path / "bin.jsonl"
    binary.write_bytes(b'{"role": "user", "content": "hi"}\n\xff\xfe')
    with pytest.raises(TranscriptError, match="is not UTF-8 text"):
        replay_transcript(binary, budget=8000, store=tmp_path / "replay.db")


def test_replaying_into_a_store_that_holds_a_replay_is_refused(tmp_path: Path) -> None:
    transcript = tmp_path / "t.jsonl"
    transcript.write_text('{"role": "user", "content": "hi"}\n{"role": "assistant", "content": "hello"}\n')
    store = tmp_path / "replay.db"
    first = replay_transcript(transcript, budget=8000, store=store)
    assert first.messages == 2
    with pytest.raises(UsageError, match=f"{store} holds a replay already"):
        replay_transcript(transcript, budget=8000, store=store)
