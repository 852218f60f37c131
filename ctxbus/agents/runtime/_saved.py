"""What an agent keeps in its own store besides its context, so others can read it back.

A restarted agent resumes its brief and its queued drops from here without a full
replay, and `ctxbus inspect` rebuilds exactly what the agent's model sees from the
same file.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import sqlite3
import tempfile
from collections.abc import Iterable
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING

from ctxbus.agents.context import ContextConfig, LayerView, LocalContext, StoreError, check_store_file, store_error
from ctxbus.schemas import BriefSnapshot, Domain, WireError, render_brief

if TYPE_CHECKING:
    from ctxbus.bus import BriefState

__all__ = [
    "apply_queued_drops",
    "inspect_store",
    "load_brief",
    "load_config",
    "load_queued_drops",
    "save_brief",
    "save_config",
    "save_queued_drops",
]

log = logging.getLogger(__name__)

BRIEF_KEY = "brief_snapshot"
CONFIG_KEY = "context_config"
QUEUED_DROPS_KEY = "queued_drops"


def load_brief(context: LocalContext) -> BriefState | None:
    """The brief the agent last saw, or None if there is none (or it is unreadable)."""
    from ctxbus.bus import BriefState  # the log's reader, which a hook without NATS never loads

    raw = context.get_state(BRIEF_KEY)
    if raw is None:
        return None
    try:
        snap = BriefSnapshot.model_validate(json.loads(raw))
    except (ValueError, WireError) as exc:
        log.warning("ignoring the saved brief in %s (%s)", context.path, exc)
        return None
    return BriefState(snap.brief, snap.seq) if snap.brief.domain == context.domain else None


def save_brief(context: LocalContext, state: BriefState) -> None:
    """Remember `state` so a restart resumes from its sequence."""
    context.set_state(BRIEF_KEY, BriefSnapshot(seq=state.seq, brief=state.brief).model_dump_json())


def save_config(context: LocalContext, config: ContextConfig) -> None:
    """Record the context settings; the store keeps none otherwise, and a reader needs them."""
    context.set_state(CONFIG_KEY, json.dumps(dataclasses.asdict(config)))


def load_config(context: LocalContext, *, source: str | Path | None = None) -> ContextConfig | None:
    """The settings the agent runs with, if it recorded them.

    The record is a plain dump of `ContextConfig`, so a store written by another build
    may hold fields this one lacks: they are ignored with a warning (a renamed or
    removed setting), and fields it lacks take their defaults. Anything else would
    make a reader compose differently from the agent, so it is an error.

    :param source: the store to name in messages, when `context` reads a copy of it.
    :raises StoreError: naming the store, if the record is not a usable `ContextConfig`.
    """
    raw = context.get_state(CONFIG_KEY)
    if raw is None:
        return None
    where = f"the context settings saved in {source or context.path}"
    try:
        fields = json.loads(raw)
    except ValueError as exc:
        raise StoreError(f"{where} are not JSON: {exc}") from exc
    if not isinstance(fields, dict):
        raise StoreError(f"{where} are not an object: {raw[:80]!r}")
    known = {f.name for f in dataclasses.fields(ContextConfig)}
    unknown = sorted(fields.keys() - known)
    if unknown:
        log.warning("ignoring %s that this build does not have: %s", where, ", ".join(unknown))
    settings = {name: value for name, value in fields.items() if name in known}
    if isinstance(settings.get("split"), list):
        settings["split"] = tuple(settings["split"])
    try:
        return ContextConfig(**settings)
    except (TypeError, ValueError) as exc:  # InvalidConfig is a ValueError
        raise StoreError(f"{where} are not usable: {exc}") from exc


def load_queued_drops(context: LocalContext) -> set[int]:
    """Tags ctx_reduce queued that no compose has applied yet."""
    return set(json.loads(context.get_state(QUEUED_DROPS_KEY) or "[]"))


def save_queued_drops(context: LocalContext, tags: Iterable[int]) -> None:
    """Remember queued drops, so a restart (or `inspect_store`) applies them too."""
    context.set_state(QUEUED_DROPS_KEY, json.dumps(sorted(tags)))


def apply_queued_drops(context: LocalContext, tags: Iterable[int], *, keep_prefix: bool = False) -> None:
    """Drop `tags` and forget them as ctx_reduce's: the first step of every compose.

    With `keep_prefix`, the context shows them as they were until its next rebuild (the
    provider's cached prefix survives); without, from this compose on.
    """
    context.drop(sorted(tags), queue=keep_prefix)
    save_queued_drops(context, ())


def inspect_store(path: Path | str, domain: Domain | str) -> tuple[LayerView, ...]:
    """What the agent's model would see at its next compose, layer by layer.

    Works on a consistent copy of the store (SQLite's backup API), so a running agent's
    file is never written to and a busy agent is never blocked. Drops that ctx_reduce
    queued are applied first, as `Agent.compose` does.

    :raises StoreError: naming `path` and what to do, if there is no store at `path`, it
        is empty, damaged or not a store, or its saved settings are unusable.
    """
    path = Path(path)
    if not path.is_file() or not check_store_file(path):
        raise StoreError(f"no agent store at {path}")
    with tempfile.TemporaryDirectory(prefix="ctxbus-inspect-") as tmp:
        copy = Path(tmp) / path.name
        try:
            try:
                with closing(sqlite3.connect(path)) as source, closing(sqlite3.connect(copy)) as target:
                    source.backup(target)
            except sqlite3.Error as exc:
                raise store_error(path, "read", exc) from exc
            with LocalContext(copy, domain) as probe:
                config = load_config(probe, source=path)
            with LocalContext(copy, domain, config=config) as context:
                apply_queued_drops(context, load_queued_drops(context))
                saved = load_brief(context)
                brief = render_brief(saved.brief) if saved else None
                return context.compose("", brief=brief).layers
        except StoreError as exc:  # about the copy: name the file the user gave
            if str(copy) not in str(exc):
                raise
            raise StoreError(str(exc).replace(str(copy), str(path))) from exc.__cause__
