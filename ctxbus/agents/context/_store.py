"""The agent's SQLite file and its one owner, `AgentStore`.

One file per agent, in WAL mode, bound to one domain on first use, opened through one
connection. Its sections, each with typed methods (no one else reads or writes the
file's tables):

- context: messages, layers, summaries, pins, archive index, snapshots, and the
  context's own settings (mode, next summary id, the archive index's progress);
- runtime state: small values other components keep with the context (the saved brief,
  queued drops, Channel 2's delivered directives, ...), written in the same transaction
  as the context changes they may record;
- nudge state: each scope's JSON document (Channel 1 and Channel 2 sections).

Every row of the context carries its domain and every query filters on it, so a file
opened for the wrong domain, or a call naming another domain, fails loudly instead of
mixing tasks. Writes are batched: the engine hands over what changed since the last
flush and it goes in as one transaction, so ingest costs a list append, not a disk write.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxbus.agents.context._archive import ARCHIVE_SCHEMA, FTS_FORMAT, SearchHit, index_pending, search_archive
from ctxbus.agents.context._calls import Call
from ctxbus.agents.context._errors import DomainMismatch, StoreError
from ctxbus.agents.context._records import ConstraintRecord, Entry, SummaryEntry

__all__ = ["AgentStore", "ContextMeta", "SCHEMA_VERSION", "check_store_file", "store_error"]

SCHEMA_VERSION = "2"
"""2 added each message's tool calls and the note shown after it (a Channel 1 reminder).
A store of schema 1 is upgraded in place when opened: the columns are added, empty, and
a call recorded then is read back from its `tool_name` and `call_id`."""
_UPGRADES = {
    "1": (("note", "TEXT NOT NULL DEFAULT ''"), ("note_tokens", "INTEGER NOT NULL DEFAULT 0"), ("tool_calls", "TEXT")),
}
"""The message columns a store of each older schema lacks, with their definitions."""

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS messages (
    tag INTEGER PRIMARY KEY, id TEXT NOT NULL, domain TEXT NOT NULL,
    role TEXT NOT NULL, kind TEXT NOT NULL, content TEXT NOT NULL,
    tool_name TEXT, call_id TEXT, importance REAL NOT NULL, ttl REAL, created_at REAL NOT NULL,
    tokens INTEGER NOT NULL, state TEXT NOT NULL, layer TEXT NOT NULL, unit INTEGER NOT NULL,
    pin TEXT NOT NULL, compact TEXT, compact_tokens INTEGER NOT NULL, refs INTEGER NOT NULL,
    note TEXT NOT NULL DEFAULT '', note_tokens INTEGER NOT NULL DEFAULT 0, tool_calls TEXT
);
CREATE TABLE IF NOT EXISTS summaries (
    id INTEGER PRIMARY KEY, domain TEXT NOT NULL, first_tag INTEGER NOT NULL,
    last_tag INTEGER NOT NULL, text TEXT NOT NULL, tokens INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS constraints (
    source_tag INTEGER PRIMARY KEY, domain TEXT NOT NULL, text TEXT NOT NULL, tokens INTEGER NOT NULL
);
CREATE TABLE IF NOT EXISTS snapshots (
    id INTEGER PRIMARY KEY AUTOINCREMENT, domain TEXT NOT NULL, created_at REAL NOT NULL,
    payload TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS nudge_state (scope TEXT PRIMARY KEY, body TEXT NOT NULL, updated_at REAL NOT NULL);
"""
_STATE_PREFIX = "state:"
"""Runtime state lives in `meta` under this prefix (where stores have always kept it)."""

_ENTRY_COLUMNS = (
    "tag, id, role, kind, content, tool_name, call_id, importance, ttl, created_at, tokens, "
    "state, layer, unit, pin, compact, compact_tokens, refs, note, note_tokens, tool_calls"
)
_INSERT_ENTRY = f"INSERT INTO messages(domain, {_ENTRY_COLUMNS}) VALUES (?{', ?' * (_ENTRY_COLUMNS.count(',') + 1)})"


_SQLITE_HEADER = b"SQLite format 3\x00"
"""The first 16 bytes of every SQLite database file."""
_MEMORY = ":memory:"


def check_store_file(path: str | Path) -> bool:
    """Whether a store exists at `path`: False if nothing is there (a new store).

    Only a missing path is a new store. A file of zero bytes (truncated, or never
    written) or one that is not a SQLite database is refused: taking it for a new store
    would start the agent empty without a word, and the first write would destroy what
    is left of it.

    :raises StoreError: naming the path and what to do, for an empty file, a file that
        is not a SQLite database, or one that cannot be read at all.
    """
    try:
        with open(path, "rb") as file:
            head = file.read(len(_SQLITE_HEADER))
    except FileNotFoundError:
        return False
    except OSError as exc:
        raise StoreError(f"cannot read context store {str(path)!r}: {exc}; check the path and its permissions") from exc
    if not head:
        raise StoreError(
            f"context store {str(path)!r} is empty (0 bytes): whatever it held is gone. "
            "Restore it from a backup, or remove it to start this agent afresh (only a missing file is a new store)"
        )
    if head != _SQLITE_HEADER:
        raise StoreError(
            f"context store {str(path)!r} is not a SQLite database (it starts {head!r}): it was overwritten, "
            "or the path names another file. Restore it from a backup or point at the agent's store; "
            "to start afresh, move it aside"
        )
    return True


def store_error(path: str | Path, action: str, exc: sqlite3.Error) -> StoreError:
    """SQLite's `exc` while trying to `action` ("open", "read", "write") the store at
    `path`, as a `StoreError` naming the file and saying what to do."""
    text = str(exc)
    code = getattr(exc, "sqlite_errorname", "")
    if code == "SQLITE_FULL" or "disk is full" in text or (action == "write" and code.startswith("SQLITE_IOERR")):
        # A file over RLIMIT_FSIZE fails with EFBIG, which SQLite reports as an I/O error.
        advice = (
            "free space on its disk (or raise the file-size limit) and check the disk; nothing of this change "
            "was written, and it can be retried once there is room"
        )
    elif code.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or "malformed" in text or "not a database" in text:
        advice = (
            "the file is damaged. Restore it from a backup, or move it aside to start this agent afresh "
            f"(`sqlite3 {path} .recover` may save what is left)"
        )
    elif code.startswith(("SQLITE_BUSY", "SQLITE_LOCKED")) or "locked" in text:
        advice = "another process holds it; stop that process (one agent per store) and retry"
    elif code.startswith(("SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM")) or "readonly" in text:
        advice = "make the file and its directory readable and writable by this user"
    elif code.startswith("SQLITE_IOERR"):
        advice = "the disk failed to read or write it; check the disk (and its free space), then retry"
    else:
        advice = "check the file, or move it aside to start this agent afresh"
    return StoreError(f"cannot {action} context store {str(path)!r}: {text}; {advice}")


def _create(path: str) -> None:
    """Make an empty store at `path` in one step: set up beside it, then linked into place,
    so no reader ever finds a zero-length file there (which `check_store_file` refuses).
    Another process creating it at the same moment wins; its file is used."""
    scratch = f"{path}.{uuid.uuid4().hex[:8]}.new"
    try:
        with contextlib.closing(sqlite3.connect(scratch, isolation_level=None)) as conn:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.executescript(_SCHEMA + ARCHIVE_SCHEMA)
        try:
            os.link(scratch, path)
        except FileExistsError:
            pass
        except OSError:  # a file system without hard links: a rename, unless one appeared meanwhile
            if not os.path.exists(path):
                os.replace(scratch, path)
    except sqlite3.Error as exc:
        raise store_error(path, "create", exc) from exc
    except OSError as exc:
        raise StoreError(f"cannot create context store {path!r}: {exc}; check that its directory is writable") from exc
    finally:
        for leftover in (scratch, f"{scratch}-wal", f"{scratch}-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(leftover)


def _check_pages(conn: sqlite3.Connection) -> None:
    """Read every page of the file once (SQLite's quick check: ~5 ms for a 14 MB store, warm), so a
    damaged page is refused when the store is opened, not found later by the one read
    that needs it while the agent runs on with part of its context.

    :raises sqlite3.DatabaseError: naming what is wrong, if anything is.
    """
    problems = [row[0] for row in conn.execute("PRAGMA quick_check(3)")]
    if problems != ["ok"]:
        raise sqlite3.DatabaseError(f"database disk image is malformed ({'; '.join(problems)})")


@dataclass(frozen=True, slots=True)
class ContextMeta:
    """What the context keeps about itself besides its messages."""

    mode: str | None
    """The mode it runs in; None for a store no context has used yet."""
    next_summary: int
    """The id the next summary entry gets."""


class AgentStore:
    """The one owner of an agent's SQLite file: one connection, typed sections (see the
    module docstring). `LocalContext` opens one for its path, or uses the one it is given.

    One open `AgentStore` per file: each context keeps its messages in memory and writes
    them by tag, so a second one would write tags the first has written already (an
    `Agent` holds a lock for it; a context alone is the caller's to open once). Not
    thread-safe: use it from one thread at a time.

    Every SQLite error leaves as a `StoreError` naming the file and what to do.

    :param path: the database file (created if missing) or ":memory:".
    :param domain: the `user/session/task` display form this store serves; None opens
        the file without binding it, for the nudge state alone (its context methods
        then refuse every domain).

    :raises DomainMismatch: if the file is already bound to another domain.
    :raises StoreError: if the file is empty, damaged or not a ctxbus context store of a
        known schema, or one of an older schema that cannot be upgraded.
    """

    def __init__(self, path: str | Path, domain: str | None) -> None:
        self.path = str(path)
        self.domain = domain
        if self.path != _MEMORY and not check_store_file(self.path):
            _create(self.path)
        try:
            self._conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        except sqlite3.Error as exc:
            raise store_error(self.path, "open", exc) from exc
        try:
            self._bind(domain)
        except BaseException:
            self._conn.close()  # the caller gets no store to close
            raise

    def _bind(self, domain: str | None) -> None:
        """Set the file up and bind it to `domain` (on first use), or refuse it."""
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=NORMAL")
            self._conn.executescript(_SCHEMA + ARCHIVE_SCHEMA)
            _check_pages(self._conn)
        except sqlite3.Error as exc:
            raise store_error(self.path, "open", exc) from exc
        bound = self._meta("domain")
        if bound is not None and domain is not None and bound != domain:
            raise DomainMismatch(bound, domain)
        version = self._meta("schema") or SCHEMA_VERSION
        if version != SCHEMA_VERSION and version not in _UPGRADES:
            raise StoreError(
                f"context store {self.path!r} has schema {version!r}; this build reads {SCHEMA_VERSION!r} "
                f"and upgrades {', '.join(map(repr, _UPGRADES))}"
            )
        if version in _UPGRADES:
            self._upgrade(version)
        if bound is None and domain is not None:
            with self._transaction():
                self._set_meta({"domain": domain, "schema": SCHEMA_VERSION})

    def _upgrade(self, version: str) -> None:
        """Bring a store of schema `version` to this one, in one transaction.

        :raises StoreError: if the file cannot be changed (read-only, locked, full).
        """
        with self._transaction():
            columns = {row[1] for row in self._conn.execute("PRAGMA table_info(messages)")}
            for column, definition in _UPGRADES[version]:
                if column not in columns:
                    self._conn.execute(f"ALTER TABLE messages ADD COLUMN {column} {definition}")
            self._conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES ('schema', ?)", (SCHEMA_VERSION,))

    def check(self, domain: str) -> None:
        """Refuse any request for another domain's data.

        :raises DomainMismatch: if `domain` is not the one this store is bound to.
        """
        if domain != self.domain:
            raise DomainMismatch(self.domain or "(none: opened for the nudge state)", domain)

    @property
    def journal_mode(self) -> str:
        """SQLite's journal mode for this file (`wal` unless the file is in memory)."""
        with self._reading():
            return str(self._conn.execute("PRAGMA journal_mode").fetchone()[0])

    # -- context section ------------------------------------------------------------------

    def context_meta(self) -> ContextMeta:
        """The context's mode and next summary id."""
        return ContextMeta(mode=self._meta("mode"), next_summary=int(self._meta("next_summary") or "1"))

    def set_mode(self, mode: str) -> None:
        """Record the mode of a context that starts on this store."""
        with self._transaction():
            self._set_meta({"mode": mode})

    def load_entries(self, domain: str) -> list[Entry]:
        """Every message of `domain`, oldest first."""
        self.check(domain)
        with self._reading():
            rows = self._conn.execute(
                f"SELECT {_ENTRY_COLUMNS} FROM messages WHERE domain = ? ORDER BY tag", (domain,)
            ).fetchall()
        return [_entry(row) for row in rows]

    def load_summaries(self, domain: str) -> list[SummaryEntry]:
        """The summary layer of `domain`, oldest first."""
        self.check(domain)
        with self._reading():
            rows = self._conn.execute(
                "SELECT id, first_tag, last_tag, text, tokens FROM summaries WHERE domain = ? ORDER BY id", (domain,)
            ).fetchall()
        return [SummaryEntry(*row) for row in rows]

    def load_constraints(self, domain: str) -> list[ConstraintRecord]:
        """The constraint records of `domain`, by source tag."""
        self.check(domain)
        with self._reading():
            rows = self._conn.execute(
                "SELECT source_tag, text, tokens FROM constraints WHERE domain = ? ORDER BY source_tag", (domain,)
            ).fetchall()
        return [ConstraintRecord(*row) for row in rows]

    def save(
        self,
        domain: str,
        *,
        new: Sequence[Entry],
        changed: Iterable[Entry],
        summaries: Mapping[int, SummaryEntry | None],
        all_summaries: Sequence[SummaryEntry] | None,
        constraints: Sequence[ConstraintRecord] | None,
        next_summary: int,
        mode: str | None = None,
        state: Mapping[str, str] | None = None,
        drop_snapshot: int | None = None,
        new_snapshot: tuple[float, dict[str, Any]] | None = None,
    ) -> int | None:
        """Write one batch of changes atomically; returns the id of `new_snapshot`, if any.

        :param summaries: summary entries written since the last save, by id; None
            means the entry was removed.
        :param all_summaries: the whole summary layer when it was replaced, else None.
        :param constraints: all constraint records, or None if they did not change.
        :param next_summary: the id the next summary entry gets.
        :param mode: the context's new mode, if it changed.
        :param state: runtime state values to set with these changes (see `runtime_state`).
        :param drop_snapshot: a snapshot to delete with this batch (the one just restored).
        :param new_snapshot: a snapshot to store with this batch, as (created at, payload).
        """
        self.check(domain)
        with self._transaction():
            if new:
                self._conn.executemany(_INSERT_ENTRY, [_entry_row(domain, e) for e in new])
            self._conn.executemany(
                "UPDATE messages SET state = ?, layer = ?, pin = ?, compact = ?, compact_tokens = ?, refs = ?, "
                "note = ?, note_tokens = ? WHERE tag = ? AND domain = ?",
                [
                    (e.state, e.layer, e.pin, e.compact, e.compact_tokens, e.refs, e.note, e.note_tokens, e.tag, domain)
                    for e in changed
                ],
            )
            if all_summaries is not None:
                self._conn.execute("DELETE FROM summaries WHERE domain = ?", (domain,))
                summaries = {s.id: s for s in all_summaries}
            removed = [(sid, domain) for sid, s in summaries.items() if s is None]
            self._conn.executemany("DELETE FROM summaries WHERE id = ? AND domain = ?", removed)
            self._conn.executemany(
                "INSERT OR REPLACE INTO summaries(id, domain, first_tag, last_tag, text, tokens) VALUES (?, ?, ?, ?, ?, ?)",
                [
                    (s.id, domain, s.first_tag, s.last_tag, s.text, s.tokens)
                    for s in summaries.values()
                    if s is not None
                ],
            )
            if constraints is not None:
                self._conn.execute("DELETE FROM constraints WHERE domain = ?", (domain,))
                self._conn.executemany(
                    "INSERT INTO constraints(source_tag, domain, text, tokens) VALUES (?, ?, ?, ?)",
                    [(c.source_tag, domain, c.text, c.tokens) for c in constraints],
                )
            self._set_meta(
                {
                    "next_summary": str(next_summary),
                    **({"mode": mode} if mode is not None else {}),
                    **{_STATE_PREFIX + key: value for key, value in (state or {}).items()},
                }
            )
            if drop_snapshot is not None:
                self._conn.execute("DELETE FROM snapshots WHERE id = ? AND domain = ?", (drop_snapshot, domain))
            if new_snapshot is None:
                return None
            created_at, payload = new_snapshot
            cur = self._conn.execute(
                "INSERT INTO snapshots(domain, created_at, payload) VALUES (?, ?, ?)",
                (domain, created_at, json.dumps(payload, separators=(",", ":"))),
            )
        assert cur.lastrowid is not None
        return cur.lastrowid

    def search(self, domain: str, query: str, limit: int) -> list[SearchHit]:
        """BM25 search over every stored message of `domain`; indexes new rows first."""
        self.check(domain)
        with self._transaction():
            done = int(self._meta("fts_indexed") or "0")
            fresh = self._meta("fts_format") == FTS_FORMAT
            indexed = index_pending(self._conn, domain, done, reindex=not fresh)
            if not fresh:
                self._set_meta({"fts_format": FTS_FORMAT})
            if indexed != done:
                self._set_meta({"fts_indexed": str(indexed)})
        with self._reading():
            return search_archive(self._conn, domain, query, limit)

    def load_snapshot(self, domain: str, snapshot_id: int | None) -> tuple[int, dict[str, Any]] | None:
        """A snapshot's id and payload (the newest if `snapshot_id` is None), or None.

        Reading does not consume it: `save(drop_snapshot=...)` deletes it in the same
        transaction that writes the restored layers, so a failed restore loses nothing.
        """
        self.check(domain)
        with self._reading():
            if snapshot_id is None:
                row = self._conn.execute(
                    "SELECT id, payload FROM snapshots WHERE domain = ? ORDER BY id DESC LIMIT 1", (domain,)
                ).fetchone()
            else:
                row = self._conn.execute(
                    "SELECT id, payload FROM snapshots WHERE domain = ? AND id = ?", (domain, snapshot_id)
                ).fetchone()
        if row is None:
            return None
        payload: dict[str, Any] = json.loads(row[1])
        return int(row[0]), payload

    def snapshot_ids(self, domain: str) -> list[int]:
        """Ids of the stored snapshots, oldest first."""
        self.check(domain)
        with self._reading():
            return [
                r[0] for r in self._conn.execute("SELECT id FROM snapshots WHERE domain = ? ORDER BY id", (domain,))
            ]

    # -- runtime state section ------------------------------------------------------------

    def runtime_state(self, key: str) -> str | None:
        """A value stored with `save(state=...)`, or None."""
        return self._meta(_STATE_PREFIX + key)

    # -- nudge state section ---------------------------------------------------------------

    def nudge_state(self, scope: str) -> str | None:
        """The nudge state document stored for `scope` (JSON), or None."""
        with self._reading():
            row = self._conn.execute("SELECT body FROM nudge_state WHERE scope = ?", (scope,)).fetchone()
        return None if row is None else str(row[0])

    def save_nudge_state(self, scope: str, body: str) -> None:
        """Replace the nudge state document of `scope`, in a transaction of its own."""
        with self._transaction():
            self._conn.execute(
                "INSERT INTO nudge_state (scope, body, updated_at) VALUES (?, ?, ?)"
                " ON CONFLICT(scope) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at",
                (scope, body, time.time()),
            )

    def close(self) -> None:
        """Checkpoint and close the file."""
        self._conn.close()

    def _meta(self, key: str) -> str | None:
        with self._reading():
            row = self._conn.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row[0])

    def _set_meta(self, values: Mapping[str, str]) -> None:
        """Set `meta` keys; inside the caller's transaction."""
        self._conn.executemany("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", values.items())

    def _transaction(self) -> _Transaction:
        return _Transaction(self._conn, self.path)

    @contextlib.contextmanager
    def _reading(self) -> Iterator[None]:
        """SQLite's errors while reading (a damaged page) leave as `StoreError`, naming the file."""
        try:
            yield
        except sqlite3.Error as exc:
            raise store_error(self.path, "read", exc) from exc


class _Transaction:
    """BEGIN ... COMMIT, or ROLLBACK on any error (the connection runs in autocommit).

    SQLite's own errors (a full disk, a file locked too long) leave as `StoreError`,
    naming the file.
    """

    def __init__(self, conn: sqlite3.Connection, path: str) -> None:
        self._conn = conn
        self._path = path

    def __enter__(self) -> None:
        try:
            self._conn.execute("BEGIN IMMEDIATE")
        except sqlite3.Error as exc:
            raise store_error(self._path, "write", exc) from exc

    def __exit__(self, exc_type: object, exc: BaseException | None, tb: object) -> None:
        if exc is None:
            try:
                self._conn.execute("COMMIT")
                return
            except sqlite3.Error as failed:
                exc = failed
        with contextlib.suppress(sqlite3.Error):  # SQLite may have rolled back already
            self._conn.execute("ROLLBACK")
        if isinstance(exc, sqlite3.IntegrityError) and "messages.tag" in str(exc):
            raise StoreError(
                f"cannot write context store {self._path!r}: another LocalContext wrote the same message "
                "tags to it; open a store in one context at a time"
            ) from exc
        if isinstance(exc, sqlite3.Error):
            raise store_error(self._path, "write", exc) from exc


def _entry_row(domain: str, e: Entry) -> tuple[object, ...]:
    return (
        domain,
        e.tag,
        e.id,
        e.role,
        e.kind,
        e.content,
        e.tool_name,
        e.call_id,
        e.importance,
        e.ttl,
        e.created_at,
        e.tokens,
        e.state,
        e.layer,
        e.unit,
        e.pin,
        e.compact,
        e.compact_tokens,
        e.refs,
        e.note,
        e.note_tokens,
        _encode_calls(e.calls),
    )


def _entry(row: Sequence[Any]) -> Entry:
    """The entry of a row of `_ENTRY_COLUMNS` (its calls last, as stored)."""
    entry = Entry(*row[:-1])
    entry.calls = _decode_calls(row[-1])
    return entry.sync_tokens()


def _encode_calls(calls: tuple[Call, ...]) -> str | None:
    """A message's calls as stored: `[[id, name, arguments], ...]`, or NULL for none."""
    if not calls:
        return None
    return json.dumps([[c.id, c.name, c.arguments] for c in calls], ensure_ascii=False, separators=(",", ":"))


def _decode_calls(raw: str | None) -> tuple[Call, ...]:
    """The calls `_encode_calls` stored (validated when written, so built unchecked)."""
    if not raw:
        return ()
    return tuple(Call(i, n, a) for i, n, a in json.loads(raw))
