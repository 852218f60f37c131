"""Persistence in one SQLite file per agent, bound to one domain."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path

import pytest

from ctxbus.agents.context import DomainMismatch, LocalContext, ModeDescriptor, StoreError, Tokenizer, UnknownMode
from ctxbus.agents.context._store import AgentStore
from tests.context.conftest import MakeContext


def _fill(ctx: LocalContext) -> None:
    ctx.add("system", "You maintain the scheduler.")
    ctx.add("user", "Make cron parsing strict. Never accept 6-field expressions.")
    for i in range(40):
        ctx.add("assistant", f"Check case {i}.", tool_name="pytest", call_id=f"p{i}")
        ctx.add(
            "tool",
            f"case {i}: " + ("ok " * 40) + ("\nERROR boom" if i % 9 == 0 else ""),
            tool_name="pytest",
            call_id=f"p{i}",
        )
    ctx.add("tool", "\n".join(f"row {i} value {i * i}" for i in range(400)), tool_name="dump")


def test_reopen_gives_the_same_state(make_ctx: MakeContext) -> None:
    ctx = make_ctx("a.db", window=2_500, settings={"reserve_system": 400, "reserve_output": 400})
    _fill(ctx)
    ctx.drop([ctx.tail()[0].tag])
    ctx.set_state("nudges.band", "firm")
    first = ctx.compose("next?", brief="goal: strict cron")
    assert first.report.trims, "the test must exercise eviction"
    next_tag, layers = ctx.next_tag, [(v.name, v.tokens, v.items) for v in ctx.inspect()]
    ctx.close()

    again = make_ctx("a.db", window=2_500, settings={"reserve_system": 400, "reserve_output": 400})
    assert again.next_tag == next_tag
    assert again.get_state("nudges.band") == "firm"
    second = again.compose("next?", brief="goal: strict cron")
    assert second.messages == first.messages
    assert [(v.name, v.tokens, v.items) for v in again.inspect()] == layers
    assert not second.report.trims
    assert again.add("user", "more") == next_tag, "tags continue where they stopped"
    assert again.messages()[0].content == "You maintain the scheduler."


def test_store_is_wal_and_bound_to_its_domain(make_ctx: MakeContext, tmp_path: Path, tokenizer: Tokenizer) -> None:
    ctx = make_ctx("b.db", domain="alice/s1/t1")
    ctx.add("user", "secret plan for alice")
    ctx.flush()
    assert ctx._store.journal_mode == "wal"
    with pytest.raises(DomainMismatch, match="alice/s1/t1.*bob/s1/t1"):
        LocalContext(tmp_path / "b.db", "bob/s1/t1", tokenizer=tokenizer)
    with pytest.raises(DomainMismatch):
        ctx.load_domain("alice/s1/t2")
    assert [m.content for m in ctx.load_domain("alice/s1/t1")] == ["secret plan for alice"]
    store = AgentStore(tmp_path / "b.db", "alice/s1/t1")
    with pytest.raises(DomainMismatch):
        store.load_entries("mallory/x/y")
    store.close()
    with sqlite3.connect(tmp_path / "b.db") as conn:
        assert {row[0] for row in conn.execute("SELECT DISTINCT domain FROM messages")} == {"alice/s1/t1"}


def _open_files(path: Path) -> list[str]:
    """Files of this process open on `path` or its -wal/-shm companions."""
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("needs /proc to see the process's open files")
    found = []
    for fd in fds.iterdir():
        try:
            target = os.readlink(fd)
        except OSError:  # the fd listing itself, closed meanwhile
            continue
        if target.startswith(str(path)):
            found.append(target)
    return found


def test_unreadable_file_is_a_store_error(tmp_path: Path, tokenizer: Tokenizer) -> None:
    bad = tmp_path / "bad.db"
    bad.write_bytes(b"this is not a database, just some bytes" * 100)
    with pytest.raises(StoreError, match="bad.db") as failed:
        LocalContext(bad, "a/b/c", tokenizer=tokenizer)
    # The traceback still holds the half-built objects: only an explicit close frees the file.
    assert failed.value.__traceback__ is not None
    assert _open_files(bad) == []


def test_a_reopen_that_fails_leaves_the_file_closed(make_ctx: MakeContext, tmp_path: Path) -> None:
    review = ModeDescriptor(name="review", system_template="Review.", kinds=frozenset({"chat"}), output_constraint="-")
    ctx = make_ctx("r.db", modes=[review])
    ctx.add("user", "Review the parser.")
    ctx.switch_mode("review")
    ctx.close()
    assert _open_files(tmp_path / "r.db") == []
    with pytest.raises(UnknownMode, match="review") as failed:
        make_ctx("r.db")
    assert failed.value.__traceback__ is not None
    assert _open_files(tmp_path / "r.db") == []
    assert make_ctx("r.db", modes=[review]).mode.name == "review"


def test_repr_shows_live_state(make_ctx: MakeContext) -> None:
    ctx = make_ctx(domain="carol/s2/t9")
    ctx.add("user", "hello")
    ctx.add("assistant", "hi")
    before = "<LocalContext carol/s2/t9 mode=task messages=2 pinned=0 rolling=2 summaries=0 unclassified=1>"
    assert repr(ctx) == before, "the goal is pinned when classified, not by looking"
    assert repr(ctx) == before
    ctx.compose()
    assert repr(ctx) == "<LocalContext carol/s2/t9 mode=task messages=2 pinned=1 rolling=1 summaries=0 unclassified=0>"


def _refuse_inserts(path: Path, table: str) -> sqlite3.Connection:
    """Another connection makes every insert into `table` fail, as a full disk would."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute(f"CREATE TRIGGER refuse BEFORE INSERT ON {table} BEGIN SELECT RAISE(ABORT, 'disk full'); END")
    return conn


def test_a_failed_flush_keeps_its_changes_for_the_next(make_ctx: MakeContext, tmp_path: Path) -> None:
    ctx = make_ctx("f.db")
    ctx.add("user", "Keep the retry budget at 3.")
    blocker = _refuse_inserts(tmp_path / "f.db", "messages")
    with pytest.raises(StoreError, match="cannot write context store .*disk full"):
        ctx.flush()
    blocker.execute("DROP TRIGGER refuse")
    ctx.flush()
    ctx.close()
    assert [m.content for m in make_ctx("f.db").messages()] == ["Keep the retry budget at 3."]


def test_a_mode_switch_that_fails_to_store_its_snapshot_changes_nothing(make_ctx: MakeContext, tmp_path: Path) -> None:
    ctx = make_ctx("m.db")
    ctx.add("user", "Write the parser.")
    ctx.flush()
    ctx.add("assistant", "Parser written.", kind="conclusion")
    blocker = _refuse_inserts(tmp_path / "m.db", "snapshots")
    with pytest.raises(StoreError, match="cannot write context store .*disk full"):
        ctx.switch_mode("chat")
    assert ctx.mode.name == "task"
    reader = make_ctx("m.db")
    assert reader.mode.name == "task" and reader.snapshots() == []
    assert [m.content for m in reader.messages()] == ["Write the parser."], "nothing of the switch was written"
    reader.close()
    blocker.execute("DROP TRIGGER refuse")
    snapshot = ctx.switch_mode("chat")
    ctx.close()
    again = make_ctx("m.db")
    assert again.mode.name == "chat" and again.snapshots() == [snapshot]
    assert [m.content for m in again.messages()] == ["Write the parser.", "Parser written."]


def test_a_state_value_is_written_with_the_changes_it_may_record(make_ctx: MakeContext) -> None:
    ctx = make_ctx("s.db")
    ctx.add("user", "Prune the tail now.", kind="synthetic")
    ctx.set_state("delivered", "c2-1")  # a crash right after this must not lose the message
    reader = make_ctx("s.db")
    assert reader.get_state("delivered") == "c2-1"
    assert [m.content for m in reader.messages()] == ["Prune the tail now."]
