"""Fixtures for the local context engine: a real tokenizer, real SQLite files, the anchors."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ctxbus.agents.context import ContextConfig, LocalContext, Tokenizer

REPO = Path(__file__).resolve().parents[2]
PROBES = Path(__file__).with_name("anchor_probes.json")


class Clock:
    """A settable clock, so ttl expiry is tested without sleeping."""

    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return Tokenizer.load()


@pytest.fixture
def clock() -> Clock:
    return Clock()


MakeContext = Callable[..., LocalContext]


@pytest.fixture
def make_ctx(tmp_path: Path, tokenizer: Tokenizer, clock: Clock) -> Iterator[MakeContext]:
    """Open contexts on files under tmp_path; all are closed at teardown."""
    opened: list[LocalContext] = []

    def make(
        name: str = "agent.db", domain: str = "alice/s1/t1", *, window: int = 16_000, **kwargs: Any
    ) -> LocalContext:
        config = kwargs.pop("config", None) or ContextConfig(window=window, **kwargs.pop("settings", {}))
        kwargs.setdefault("tokenizer", tokenizer)
        kwargs.setdefault("clock", clock)
        ctx = LocalContext(tmp_path / name, domain, config=config, **kwargs)
        opened.append(ctx)
        return ctx

    yield make
    for ctx in opened:
        ctx.close()


def anchors_dir() -> Path:
    """`$CTXBUS_ANCHORS`, else the shared anchors next to the repository."""
    return Path(os.environ.get("CTXBUS_ANCHORS", REPO / ".." / "shared" / "anchors")).resolve()


@pytest.fixture(scope="session")
def transcripts() -> Path:
    root = anchors_dir() / "transcripts"
    if not root.is_dir():  # the conformance data is required, not optional
        pytest.fail(f"anchor transcripts not found at {root} (set CTXBUS_ANCHORS)")
    return root


def load_session(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def probes_for(root: Path, path: Path) -> list[str]:
    rel = path.relative_to(root)
    groups = json.loads(PROBES.read_text())["groups"]
    return [probe for group in groups if rel.match(group["files"]) for probe in group["probes"]]


def add_raw(ctx: LocalContext, m: dict[str, Any]) -> int:
    """Add one transcript line."""
    return ctx.add(m["role"], m["content"], tool_name=m.get("tool_name") or None, call_id=m.get("tool_call_id") or None)


def rendered_tokens(tokenizer: Tokenizer, messages: list[dict[str, str]], overhead: int = 4) -> int:
    """What a composed prompt really costs: every message tokenized afresh, plus overhead."""
    return sum(tokenizer.count(m["content"]) + overhead for m in messages)


def rendered_cost(tokenizer: Tokenizer, messages: list[dict[str, Any]], overhead: int = 4) -> int:
    """What a Chat Completions rendering costs counted afresh: each message's text plus
    overhead, and each call's id, name and arguments."""
    total = 0
    for m in messages:
        total += tokenizer.count(m["content"]) + overhead
        for call in m.get("tool_calls", ()):
            total += sum(tokenizer.count(part) for part in (call["id"], *call["function"].values()))
    return total
