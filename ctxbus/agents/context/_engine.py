"""`LocalContext`: one agent's three-layer context, persisted in its own SQLite file."""

from __future__ import annotations

import inspect
import re
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ctxbus.agents.context._archive import SearchHit, read_lines
from ctxbus.agents.context._calls import skeleton_tokens
from ctxbus.agents.context._compose import plan, protected_units
from ctxbus.agents.context._config import ContextConfig
from ctxbus.agents.context._errors import ContextClosed, DomainMismatch, InvalidMessage, UnknownMode, UnknownReference
from ctxbus.agents.context._modes import ModeDescriptor, lookup_mode, resolve_modes
from ctxbus.agents.context._records import ConstraintRecord, Entry, SummaryEntry, drop_placeholder
from ctxbus.agents.context._render import render
from ctxbus.agents.context._report import Composition, LayerView, TailItem, logger
from ctxbus.agents.context._state import ContextState, check_message
from ctxbus.agents.context._store import AgentStore
from ctxbus.agents.context._summary import ExtractiveSummarizer, Summarizer
from ctxbus.agents.context._tokens import Tokenizer
from ctxbus.schemas import Domain, Message, ToolCall

__all__ = ["LocalContext"]

_REF = re.compile(r"^\s*§?(\d+)§?\s*$")
_COUNT_CACHE_SIZE = 32


class LocalContext:
    """The context of one agent: pinned, rolling and summary layers under a token budget.

    Pure and synchronous; its only I/O is its SQLite file. Changes are written in one
    transaction at every `compose` (unless `autoflush` is off), `drop`, mode switch,
    `search`, `flush` and `close`; that is the durability point. Not thread-safe: use it
    from one thread (or task) at a time.

    :param path: the agent's SQLite file (created if missing), or an open `AgentStore` of
        it, which the context then uses and leaves open (its opener closes it).
    :param domain: the `user/session/task` this context belongs to.
    :param config: window, reserves and thresholds; the store keeps no copy, so pass the
        same one on reopen to get the same composes.
    :param tokenizer: a loaded `Tokenizer`; by default `config.encoding` is loaded.
    :param summarizer: writes the summary layer; `ExtractiveSummarizer` by default.
    :param modes: extra modes, by name, on top of chat / task / knowledge.
    :param mode: the mode to start in when the store is new.
    :param clock: seconds since the epoch; injectable for ttl tests.
    :param autoflush: write changes at the end of every `compose`. Turn it off to take
        the disk write (and SQLite's occasional WAL checkpoint, an fsync) off the path to
        the model: compose, start the model call, then `flush()` while it runs.
    :raises DomainMismatch: if the file belongs to another domain.
    :raises InvalidConfig, EncodingNotFound, UnknownMode: for unusable settings.
    """

    def __init__(
        self,
        path: str | Path | AgentStore,
        domain: Domain | str,
        *,
        config: ContextConfig | None = None,
        tokenizer: Tokenizer | None = None,
        summarizer: Summarizer | None = None,
        modes: Iterable[ModeDescriptor] | None = None,
        mode: str = "task",
        clock: Callable[[], float] = time.time,
        autoflush: bool = True,
    ) -> None:
        self._domain = Domain.of(domain)
        self._key = str(self._domain)
        self.config = config or ContextConfig()
        self.tokenizer = tokenizer or Tokenizer.load(self.config.encoding, pattern=self.config.encoding_pattern)
        self.summarizer: Summarizer = summarizer or ExtractiveSummarizer()
        self._modes = resolve_modes(modes)
        self._clock = clock
        self._autoflush = autoflush
        self._counts: dict[str, int] = {}
        self._last: Composition | None = None
        self._state = ContextState(self.config, self.tokenizer)
        self._owns_store = not isinstance(path, AgentStore)
        self._store = AgentStore(path, self._key) if not isinstance(path, AgentStore) else path
        try:
            self._store.check(self._key)
            saved = self._store.context_meta()
            self._mode = lookup_mode(self._modes, saved.mode or mode)
            if saved.mode is None:  # a new store: a reopen must not fall back to another default
                self._store.set_mode(self._mode.name)
            self._state.load(
                self._store.load_entries(self._key),
                self._store.load_summaries(self._key),
                self._store.load_constraints(self._key),
                saved.next_summary,
            )
        except BaseException:
            if self._owns_store:
                self._store.close()  # the caller gets no context to close
            raise
        self._closed = False

    # -- properties --------------------------------------------------------------------

    @property
    def domain(self) -> Domain:
        """The domain this context (and its store) is bound to."""
        return self._domain

    @property
    def mode(self) -> ModeDescriptor:
        """The current mode."""
        return self._mode

    @property
    def next_tag(self) -> int:
        """The tag the next message will get; never goes back, survives reopen."""
        return self._state.next_tag

    @property
    def path(self) -> str:
        """The SQLite file."""
        return self._store.path

    def __repr__(self) -> str:
        # Counts as they are: classifying here would move messages between layers, and a
        # repr (a debugger, a log line) must not change what the next compose does.
        st = self._state
        return (
            f"<LocalContext {self._key} mode={self._mode.name} messages={len(st.entries)} "
            f"pinned={len(st.pinned)} rolling={len(st.rolling)} summaries={len(st.summaries)} "
            f"unclassified={len(st.unclassified)}>"
        )

    # -- ingest ------------------------------------------------------------------------

    def add(
        self,
        role: str,
        content: str,
        *,
        kind: str | None = None,
        tool_calls: Iterable[ToolCall | Mapping[str, Any]] | None = None,
        tool_name: str | None = None,
        call_id: str | None = None,
        importance: float | None = None,
        ttl: float | None = None,
        created_at: float | None = None,
    ) -> int:
        """Record a message and return its tag; it is counted once, here.

        An assistant turn's calls go in `tool_calls`, each with its id, name and argument
        string (a `ToolCall`, or a mapping: flat, an OpenAI tool call, or an Anthropic
        `tool_use` block; see `ToolCall`). One call may instead be given as `tool_name`
        and `call_id` (its arguments are then unknown). A tool result names the call it
        answers with `call_id` (and the tool with `tool_name`); one without an id answers
        the call before it.

        `kind` defaults from the role (tool -> tool_result, assistant with calls ->
        tool_call, else chat). `importance` defaults by role and kind; system text and the
        first user message (the goal) are pinned. User and system messages that state a
        constraint are pinned (short ones whole, long ones by their constraint
        sentences). Tool output over `archive_threshold` is archived.

        Returns the tag rather than the `Message` because ingest is the hot path; get the
        full model with `message(tag)`.

        :raises InvalidMessage: for an unknown role or kind, an out-of-range value, or
            calls that are malformed or on a message that cannot make them.
        """
        self._check_open()
        entry = self._state.add(
            role,
            content,
            kind=kind,
            tool_name=tool_name,
            call_id=call_id,
            importance=importance,
            ttl=ttl,
            created_at=self._clock() if created_at is None else created_at,
            tool_calls=tool_calls,
        )
        return entry.tag

    def annotate(self, ref: int | str, text: str) -> None:
        """Append `text` to what the model is shown of a tool result, from the next compose on.

        For what the host adds to a result on its way to the model, such as a Channel 1
        reminder: it is shown inside that tool message, after the output (or after its
        compact form, if archived), counted in the prompt's budget but not in the tail
        (`TailItem.tokens`), and kept with the message. A drop replaces it with the rest.

        :raises UnknownReference: if `ref` names no message, or one that is not a tool result.
        """
        self._check_open()
        entry = self._resolve(ref)
        self._state.annotate(entry.tag, text)

    def extend(self, messages: Iterable[Mapping[str, Any]]) -> list[int]:
        """`add` each mapping (keys as `add`'s parameters) and return their tags.

        All or nothing: every item is checked before the first is added, so a bad item
        does not leave half a batch behind.

        :raises InvalidMessage: for an item that is not a mapping, a missing or unknown key,
            or an unusable value; nothing is added then.
        """
        self._check_open()
        batch = [_message_fields(item) for item in messages]
        return [self.add(**fields) for fields in batch]

    def message(self, ref: int | str) -> Message:
        """The stored message with a tag (`12`, `"§12§"`) or id, as it is now.

        :raises UnknownReference: if no message has that tag or id.
        """
        self._check_open()
        return self._resolve(ref).to_message()

    def messages(self) -> list[Message]:
        """Every message of this agent, oldest first (whatever layer it is in)."""
        self._check_open()
        return [e.to_message() for e in self._state.entries]

    # -- compose / inspect -------------------------------------------------------------

    def compose(self, user_input: str = "", *, brief: str | None = None) -> Composition:
        """The prompt for the next model call, and a report of what was trimmed and why.

        The prompt is the system message (the host's `system_prompt`, else the mode's
        template and output constraint), then one user message with the pinned block, the
        summary and the brief, then the rolling layer, then `user_input`; send it with
        `Composition.to_openai()` or `to_anthropic()`. The total never exceeds
        `window - reserve_output`. `user_input` is not recorded: `add` it once the turn is
        taken, so a retried compose does not repeat it.

        Between rebuilds the prompt only grows at its end (a provider's prompt cache then
        serves all of the previous one); `report.rebuild` says why one was rebuilt. A
        change of `brief` since the last rebuild is shown as a delta message at the end.

        :raises InputTooLarge: if `user_input` alone does not fit.
        """
        self._settle()
        decided = plan(
            self._state,
            self.summarizer,
            self._mode,
            user_input,
            brief,
            now=self._clock(),
            domain=self._key,
            count=self._count_cached,
        )
        self._state.apply(decided)
        result = render(decided)
        self._last = result
        if self._autoflush:
            self.flush()
        return result

    def inspect(self) -> tuple[LayerView, ...]:
        """Exactly what the model saw at the last compose, layer by layer with token counts.

        With no compose since open, composes with no user input first.
        """
        self._check_open()
        if self._last is None:
            self.compose()
        assert self._last is not None
        return self._last.layers

    # -- archive ------------------------------------------------------------------------

    def read(
        self,
        ref: int | str,
        *,
        lines: tuple[int, int | None] | None = None,
        query: str | None = None,
        offset: int = 0,
        limit: int | None = None,
    ) -> str:
        """The full text of a message (archived, evicted or dropped: nothing is lost).

        :param ref: a tag (`12`, `"§12§"`) or a message id.
        :param lines: a 1-based inclusive line range, returned with line numbers; an
            open end (`(5, None)`) reads to the last line.
        :param query: return only the numbered lines containing any of its words.
        :param limit: at most this many characters of the answer, with a line saying
            where to read on (a 10 MB line is read in pages); None for all of it.
        :param offset: where in the answer to start (the offset that line gives).
        :raises UnknownReference: if no message has that tag or id.
        :raises LinesPastTheEnd: if the range starts after the message's last line.
        :raises UsageError: if `offset` is past the end of the answer.
        """
        self._check_open()
        entry = self._resolve(ref)
        self._state.referred(entry)
        return read_lines(entry.content, tag=entry.tag, lines=lines, query=query, offset=offset, limit=limit)

    def search(self, query: str, *, limit: int = 5) -> list[SearchHit]:
        """BM25-ranked compact hits over every message of this agent (SQLite FTS5).

        :raises UsageError: if the query has no words or `limit` < 1.
        """
        self._check_open()
        self.flush()
        hits = self._store.search(self._key, query, limit)
        for hit in hits:
            entry = self._state.entry(hit.tag)
            if entry is not None:
                self._state.referred(entry)
        return hits

    # -- tail hygiene hooks (nudges) ------------------------------------------------------

    def tail(self) -> list[TailItem]:
        """The rendered rolling tail, oldest first, with what tail hygiene needs."""
        self._settle()
        visible = [e for e in self._state.rolling if e.kind in self._mode.kinds]
        protected = protected_units(visible, self.config.protected_recent)
        queued = self._state.head.queued
        items = [
            TailItem(e.tag, e.id, e.role, e.kind, e.tool_name, e.tail_tokens, e.state, e.unit in protected, e.unit)
            for e in visible
        ]
        if queued:  # shown as they were until the next rebuild: counted as shown
            items = [
                TailItem(i.tag, i.id, i.role, i.kind, i.tool_name, q.tail_tokens, "active", i.protected, i.unit, True)
                if (q := queued.get(i.tag)) is not None
                else i
                for i in items
            ]
        return items

    def drop(self, tags: int | str | Iterable[int | str], *, queue: bool = False) -> list[int]:
        """Replace rolling messages by a `[dropped §N§]` placeholder (`ctx_reduce`).

        The full text stays readable and searchable. Messages not in rolling or already
        dropped are skipped; the tags actually dropped are returned. Protection policy is
        the caller's: this drops what it is told to.

        A message the last prompt showed is shown dropped from the next compose on, which
        then rebuilds the head (the provider's cached prefix is lost). With `queue`, it
        keeps being shown as it was until the next rebuild (the high-water mark, the cache
        lifetime, or anything else that rebuilds): magic-context's rule, for a tail not
        yet past urgent. `tail()` marks such a message `queued`, with the tokens it
        still costs. The drop is recorded at once either way: a reopened context shows
        the placeholder at its first compose.

        :param tags: one reference (a tag `12`, `"12"` or `"§12§"`, or a message id) or an
            iterable of them. A str is one reference, never its characters.
        :raises UnknownReference: if a reference names no message, or is not a tag or id
            (nothing is dropped then).
        """
        self._settle()
        # A str (or bytes) is one reference: iterating it would take "12" as §1§ and §2§.
        refs: Iterable[object] = (
            [tags] if isinstance(tags, str | bytes | bytearray) or not isinstance(tags, Iterable) else tags
        )
        entries = [self._resolve(ref) for ref in refs]
        done: list[int] = []
        for e in entries:
            if e.layer != "rolling" or e.state == "dropped":
                continue
            placeholder = drop_placeholder(e.tag)
            # A dropped call still shows its id and name (its result may be shown).
            tokens = self.tokenizer.count(placeholder) + skeleton_tokens(self.tokenizer.count, e.calls, e.keys)
            self._state.drop(e, placeholder, tokens, queue=queue)
            done.append(e.tag)
            logger.info(
                "context drop §%s§",
                e.tag,
                extra={"event": "drop", "domain": self._key, "msg_id": e.id, "tag": e.tag},
            )
        self.flush()
        return done

    # -- modes ----------------------------------------------------------------------------

    def switch_mode(self, name: str) -> int:
        """Snapshot the layers, then switch to mode `name`; returns the snapshot id.

        :raises UnknownMode: if no mode has that name.
        """
        self._settle()  # the snapshot must hold the layers as ingest leaves them
        new = lookup_mode(self._modes, name)
        snapshot = self._write(mode=new.name, new_snapshot=(self._clock(), self._snapshot()))
        assert snapshot is not None
        logger.info(
            "context mode %s -> %s (snapshot %s)",
            self._mode.name,
            new.name,
            snapshot,
            extra={
                "event": "mode_switch",
                "domain": self._key,
                "from": self._mode.name,
                "to": new.name,
                "snapshot": snapshot,
            },
        )
        self._mode = new
        self._last = None
        self._state.rebuild_due("mode")
        return snapshot

    def restore(self, snapshot: int | None = None) -> str:
        """Bring back the layers and mode of a snapshot (the newest if None); returns the mode.

        Messages added since the snapshot stay (in rolling); constraints found since stay
        pinned; drops stay dropped. A message dropped since is not pinned again, where only
        its placeholder would show: it stays in rolling, and a constraint record cut from it
        stays pinned. Restored messages with a ttl expire as before. The snapshot is
        consumed, in the same transaction that writes the restored layers: a restore that
        fails leaves the snapshot in place.

        :raises UnknownMode: if there is no such snapshot, or its mode is not registered.
        """
        self._settle()
        found = self._store.load_snapshot(self._key, snapshot)
        if found is None:
            raise UnknownMode(f"no snapshot {snapshot!r} to restore" if snapshot else "no snapshot to restore")
        snapshot_id, payload = found
        mode = lookup_mode(self._modes, payload["mode"])
        self._state.restore(
            max_tag=int(payload["max_tag"]),
            placed={int(tag): (layer, pin) for tag, layer, pin in payload["layers"]},
            summaries=[SummaryEntry(*row) for row in payload["summaries"]],
            records=[ConstraintRecord(*row) for row in payload["records"]],
        )
        logger.info(
            "context restore snapshot -> mode %s",
            mode.name,
            extra={"event": "mode_restore", "domain": self._key, "from": self._mode.name, "to": mode.name},
        )
        self._mode = mode
        self._last = None
        self._write(mode=mode.name, drop_snapshot=snapshot_id)
        return mode.name

    def snapshots(self) -> list[int]:
        """Ids of the snapshots that can be restored, oldest first."""
        self._check_open()
        return self._store.snapshot_ids(self._key)

    # -- small persistent state for other components (e.g. nudges) ----------------------

    def get_state(self, key: str) -> str | None:
        """A value another component stored with `set_state` (survives restarts)."""
        self._check_open()
        return self._store.runtime_state(key)

    def set_state(self, key: str, value: str) -> None:
        """Store a small string value durably, now, in one transaction with every change
        since the last flush: a value that records something done (a message delivered)
        is never on disk without what it records."""
        self._check_open()
        self._write(state={key: value})

    # -- persistence ----------------------------------------------------------------------

    def load_domain(self, domain: Domain | str) -> list[Message]:
        """All messages of `domain` from the store.

        :raises DomainMismatch: unless `domain` is the one this store is bound to.
        """
        key = str(Domain.of(domain))
        if key != self._key:
            raise DomainMismatch(self._key, key)
        self.flush()
        return [e.to_message() for e in self._store.load_entries(key)]

    def flush(self) -> None:
        """Write every change since the last flush in one transaction."""
        self._check_open()
        self._write()

    def _write(
        self,
        *,
        mode: str | None = None,
        state: Mapping[str, str] | None = None,
        drop_snapshot: int | None = None,
        new_snapshot: tuple[float, dict[str, Any]] | None = None,
    ) -> int | None:
        """Write pending changes, plus a new mode, runtime state values and a snapshot to
        drop or to store, in one transaction; returns the stored snapshot's id."""
        st = self._state
        changes = st.drain()
        if changes.empty and mode is None and not state and drop_snapshot is None and new_snapshot is None:
            return None
        try:
            return self._store.save(
                self._key,
                new=changes.new,
                changed=changes.changed,
                summaries=changes.summaries,
                all_summaries=changes.all_summaries,
                constraints=changes.constraints,
                next_summary=changes.next_summary,
                mode=mode,
                state=state,
                drop_snapshot=drop_snapshot,
                new_snapshot=new_snapshot,
            )
        except BaseException:
            st.undrain(changes)
            raise

    def close(self) -> None:
        """Flush and close the file. Idempotent.

        The file is closed (and let go for another context) even when that last flush
        fails, whose error is raised then: a store that cannot take the changes must not
        stay open for good, retrying them.
        """
        if self._closed:
            return
        try:
            self.flush()
        finally:
            self._closed = True
            if self._owns_store:
                self._store.close()

    def __enter__(self) -> LocalContext:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- helpers ----------------------------------------------------------------------------

    def _snapshot(self) -> dict[str, Any]:
        st = self._state
        return {
            "mode": self._mode.name,
            "max_tag": len(st.entries),
            "layers": [[e.tag, e.layer, e.pin] for e in st.entries if e.layer != "rolling" or e.pin],
            "summaries": [[s.id, s.first_tag, s.last_tag, s.text, s.tokens] for s in st.summaries],
            "records": [[r.source_tag, r.text, r.tokens] for r in st.records.values()],
        }

    def _resolve(self, ref: object) -> Entry:
        """The entry `ref` names: a tag (`12`, `"12"`, `"§12§"`) or a message id.

        :raises UnknownReference: if `ref` is none of those, or no message has it.
        """
        if isinstance(ref, bool) or not isinstance(ref, int | str):
            raise UnknownReference(
                f"{ref!r:.60} ({type(ref).__name__}) is not a message reference; "
                "expected a tag (12, '12', '§12§') or a message id"
            )
        entry: Entry | None = None
        if isinstance(ref, int):
            entry = self._state.entry(ref)
        elif match := _REF.match(ref):
            entry = self._state.entry(int(match.group(1)))
        elif "-" in ref:
            tag = ref.rsplit("-", 1)[1]
            found = self._state.entry(int(tag)) if tag.isdigit() else None
            entry = found if found is not None and found.id == ref else None
        if entry is None:
            raise UnknownReference(f"no message with tag or id {ref!r} (tags run 1..{len(self._state.entries)})")
        return entry

    def _count_cached(self, text: str) -> int:
        tokens = self._counts.get(text)
        if tokens is None:
            if len(self._counts) >= _COUNT_CACHE_SIZE:
                self._counts.pop(next(iter(self._counts)))
            tokens = self._counts[text] = self.tokenizer.count(text)
        return tokens

    def _check_open(self) -> None:
        if self._closed:
            raise ContextClosed(f"this LocalContext ({self._key}) is closed")

    def _settle(self) -> None:
        """Check the context is open and finish classifying ingest.

        Call it before anything moves messages between layers or states: classification
        skips messages already moved, so a constraint dropped or restored away before it
        was classified would be lost silently (DESIGN §3).
        """
        self._check_open()
        self._state.classify_pending()


_ADD_FIELDS = frozenset(inspect.signature(LocalContext.add).parameters) - {"self"}


def _message_fields(item: Mapping[str, Any]) -> dict[str, Any]:
    """`add`'s keyword arguments from one `extend` item, fully checked.

    :raises InvalidMessage: for an item that is not a mapping, a missing or unknown key,
        or an unusable value.
    """
    if not isinstance(item, Mapping):
        raise InvalidMessage(
            f"message {item!r:.60} is a {type(item).__name__}; expected a mapping of add's "
            "parameters, such as {'role': 'user', 'content': '...'}"
        )
    fields = dict(item)
    for required in ("role", "content"):
        if required not in fields:
            raise InvalidMessage(f"message {item!r} has no {required!r}")
    unknown = sorted(map(str, fields.keys() - _ADD_FIELDS))
    if unknown:
        raise InvalidMessage(
            f"message {item!r} has unknown key(s) {', '.join(map(repr, unknown))}; "
            f"expected some of {', '.join(sorted(_ADD_FIELDS))}"
        )
    check_message(
        fields["role"],
        fields["content"],
        fields.get("kind"),
        fields.get("tool_name"),
        fields.get("call_id"),
        fields.get("importance"),
        fields.get("ttl"),
        fields.get("created_at"),
        fields.get("tool_calls"),
    )
    return fields
