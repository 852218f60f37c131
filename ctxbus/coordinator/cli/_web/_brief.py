"""The brief and its history for `ctxbus web`: the log read as every replica reads it
(as `ctxbus log` does), kept per domain and read on from where it stopped."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import anyio

from ctxbus.bus import BriefLog, BriefState, LogEntry, Verb, read_entry, subject
from ctxbus.schemas import Commit, Domain, TaskBrief, apply, brief_hash, render_brief

__all__ = ["BriefHistory", "RevisionUnknown"]


class RevisionUnknown(LookupError):
    """Asked for a revision the log does not hold (not committed yet, or purged)."""


@dataclass
class _Read:
    """One domain's log as read so far."""

    state: BriefState
    rows: list[dict[str, Any]] = field(default_factory=list)
    lock: anyio.Lock = field(default_factory=anyio.Lock)


class BriefHistory:
    """Reads domains' logs for the page. The one owner of what it has read."""

    def __init__(self, brief_log: BriefLog) -> None:
        self._log = brief_log
        self._read: dict[Domain, _Read] = {}

    async def current(self, domain: Domain) -> tuple[BriefState, list[dict[str, Any]]]:
        """The brief as the log gives it now, and the log's timeline (a row per commit)."""
        read = self._read.setdefault(domain, _Read(BriefState(TaskBrief(domain=domain), 0)))
        async with read.lock:
            entries = self._log.txlog.read(subject(domain, Verb.TX), read.state.seq + 1)
            try:
                async for entry in entries:
                    read.state = self._take(read.state, entry, read.rows)
            finally:
                await entries.aclose()
            return read.state, list(read.rows)

    async def snapshot(self, domain: Domain) -> dict[str, int] | None:
        """Where the latest snapshot stands (revision, sequence), if there is one."""
        state = await self._log.load_snapshot(domain)
        return None if state.seq == 0 else {"revision": state.brief.revision, "seq": state.seq}

    def _take(self, state: BriefState, entry: LogEntry, rows: list[dict[str, Any]]) -> BriefState:
        unsigned = self._log.unsigned(entry)
        outcome = read_entry(state, entry) if unsigned is None else None
        skipped = unsigned if outcome is None else outcome.skipped
        if outcome is None or skipped is not None:
            rows.append({"seq": entry.seq, "kind": "skipped", "revision": None, "text": f"skipped: {skipped}"})
            return BriefState(state.brief, entry.seq)
        idle = {id(c) for c in outcome.idle}
        for commit in sorted((*outcome.commits, *outcome.idle), key=lambda c: c.revision):
            rows.append(_row(entry.seq, commit, no_effect=id(commit) in idle))
        return outcome.state

    async def at_revision(self, domain: Domain, revision: int) -> TaskBrief:
        """The brief as it was right after `revision`: the log replayed up to that commit.

        :raises RevisionUnknown: if no commit of the log has that revision.
        """
        state = BriefState(TaskBrief(domain=domain), 0)
        entries = self._log.txlog.read(subject(domain, Verb.TX))
        try:
            async for entry in entries:
                if self._log.unsigned(entry) is not None:
                    continue
                before = state.brief
                outcome = read_entry(state, entry)
                if outcome.skipped is not None:
                    state = BriefState(before, entry.seq)
                    continue
                if outcome.state.brief.revision < revision:
                    state = outcome.state
                    continue
                # The entry holding `revision` may hold later ones too: its commits one by one.
                brief = before
                commits: list[Commit] = sorted((*outcome.commits, *outcome.idle), key=lambda c: c.revision)
                for commit in commits:
                    if commit.revision > revision:
                        break
                    brief = apply(brief, commit)
                if brief.revision != revision:
                    break
                return brief
        finally:
            await entries.aclose()
        raise RevisionUnknown(f"revision {revision} is not in the log of {domain}")


def brief_json(brief: TaskBrief) -> dict[str, Any]:
    """A brief for the page: as `ctxbus brief show` prints it, and its fields."""
    return {
        "revision": brief.revision,
        "hash": brief_hash(brief),
        "text": render_brief(brief),
        "rejected": [
            {"option": r.option, "reason": r.reason, "by": r.author, "revision": r.rev} for r in brief.rejected
        ],
        "closed": brief.closed is not None,
    }


def _row(seq: int, commit: Commit, *, no_effect: bool) -> dict[str, Any]:
    fields = commit.op.model_dump(mode="json", exclude={"op"})
    detail = "; ".join(f"{k}={v!r}" for k, v in fields.items() if v not in ("", None, [], {}))
    op = commit.op.op
    kind = "no_effect" if no_effect else ("rejection" if op == "reject" else "fold" if op == "fold_done" else "commit")
    return {
        "seq": seq,
        "revision": commit.revision,
        "ts": commit.ts,
        "author": commit.author,
        "op": op,
        "kind": kind,
        "fields": fields,
        "text": f"{op} by {commit.author}: {detail}" if detail else f"{op} by {commit.author}",
    }
