"""Turn magic-context's hygiene vectors into our tail parts and tag rows.

This mirrors how the reference generator builds its messages (see the anchors README):
blocks are expanded as ``unit * repeat``, tool inputs are rendered as compact JSON with
sorted keys, a tool result belongs to the oldest unanswered call with its id, and a
tool tag covers both the call and the result of the call it names. A legacy tag whose
``block_id`` is a bare call id is attributed only when every part with that call id
has the same owner; the reference's extra neighbourhood check never decides a case in
these vectors.
"""

from __future__ import annotations

import base64
import json
import math
import os
import struct
from collections import defaultdict, deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ctxbus.agents.nudges import PartKind, TagKind, TailPart, TailTag

ANCHORS_ENV = "CTXBUS_ANCHORS"
IMAGE_TOKEN_DIVISOR = 750
IMAGE_TOKEN_CAP = 4500
IMAGE_FALLBACK_TOKENS = 1200
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def anchors_dir() -> Path:
    """`../shared/anchors/magic-context` next to the repo, or under $CTXBUS_ANCHORS."""
    root = os.environ.get(ANCHORS_ENV)
    repo = Path(__file__).resolve().parents[2]
    base = Path(root) if root else repo / ".." / "shared" / "anchors"
    folder = base / "magic-context"
    if not folder.is_dir():
        raise FileNotFoundError(f"magic-context anchors not found at {folder}; set {ANCHORS_ENV}")
    return folder


def load_anchor(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((anchors_dir() / name).read_text(encoding="utf-8"))
    return data


@dataclass(frozen=True)
class GoldenTail:
    """One hygiene case as our walk sees it."""

    case_id: str
    parts: tuple[TailPart, ...]
    tags: tuple[TailTag, ...]
    floor: int
    legacy_protected_tags: int
    queued: frozenset[int]
    expected_u: int
    expected_t: int
    expected_band: str
    message_ends: tuple[int, ...]
    """Index just past each message's last part, to replay the tail turn by turn."""

    def legacy_protected(self) -> frozenset[int]:
        """Schema 1's rule: the newest `protected_tags` active tags of any kind."""
        numbers = sorted((tag.number for tag in self.tags), reverse=True)
        return frozenset(numbers[: self.legacy_protected_tags])


def build_case(case: dict[str, Any]) -> GoldenTail:
    messages: list[dict[str, Any]] = case["messages"]
    owners = _tool_owners(messages)
    tags_by_block = {tag["block_id"]: tag for tag in case["tags"]}
    tool_tag_by_arc = _tool_tag_by_arc(case["tags"], messages, owners)
    parts: list[TailPart] = []
    ends: list[int] = []
    for message in messages:
        mid = message["mid"]
        synthetic = bool(message.get("synthetic", False))
        for index, block in enumerate(message["blocks"]):
            key = f"{mid}#{index}"
            own_tag = tags_by_block.get(key)
            parts.append(_part(block, key, own_tag, owners, tool_tag_by_arc, synthetic))
        ends.append(len(parts))
    tags = tuple(
        TailTag(
            number=tag["tag_number"],
            kind=TagKind(tag["kind"]),
            tokens=tag.get("token_count", 0),
            tool_name="read" if tag["kind"] == "tool" else None,
        )
        for tag in sorted(case["tags"], key=lambda tag: tag["tag_number"])
    )
    expected = case["expected"]
    return GoldenTail(
        case_id=case["id"],
        parts=tuple(parts),
        tags=tags,
        floor=case.get("protected_tokens_effective", 0),
        legacy_protected_tags=case["protected_tags"],
        queued=frozenset(case.get("pending_drop_tag_numbers", ())),
        expected_u=expected["u"],
        expected_t=expected["t"],
        expected_band=expected["band"],
        message_ends=tuple(ends),
    )


def _part(
    block: dict[str, Any],
    key: str,
    own_tag: dict[str, Any] | None,
    owners: dict[str, str],
    tool_tag_by_arc: dict[str, int],
    synthetic: bool,
) -> TailPart:
    kind = block["type"]
    if kind in ("text", "reasoning"):
        tag = own_tag["tag_number"] if own_tag and own_tag["kind"] == "message" else None
        part_kind = PartKind.TEXT if kind == "text" else PartKind.REASONING
        text = block["unit"] * block["repeat"]
        return TailPart(key=key, kind=part_kind, text=text, tag=tag, synthetic=synthetic)
    if kind == "file":
        tag = own_tag["tag_number"] if own_tag and own_tag["kind"] == "file" else None
        image = block["mime"].startswith("image/")
        tokens = image_tokens(block["url"]) if image else None
        return TailPart(key=key, kind=PartKind.FILE, text=block["url"], tag=tag, tokens=tokens)
    arc = owners[key]
    if kind == "tool_call":
        text = json.dumps(block["input"], sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        part_kind = PartKind.TOOL_INPUT
    else:
        text = block["unit"] * block["repeat"]
        part_kind = PartKind.TOOL_OUTPUT
    return TailPart(key=key, kind=part_kind, text=text, tag=tool_tag_by_arc.get(arc), arc=arc)


def _tool_owners(messages: list[dict[str, Any]]) -> dict[str, str]:
    """Arc (``owner\\0call_id``) of every tool block, keyed by ``mid#index``."""
    pending: defaultdict[str, deque[str]] = defaultdict(deque)
    arcs: dict[str, str] = {}
    for message in messages:
        for index, block in enumerate(message["blocks"]):
            key = f"{message['mid']}#{index}"
            if block["type"] == "tool_call":
                pending[block["id"]].append(message["mid"])
                arcs[key] = f"{message['mid']}\0{block['id']}"
            elif block["type"] == "tool_result":
                queue = pending[block["id"]]
                owner = queue.popleft() if queue else message["mid"]
                arcs[key] = f"{owner}\0{block['id']}"
    return arcs


def _tool_tag_by_arc(
    tags: list[dict[str, Any]], messages: list[dict[str, Any]], owners: dict[str, str]
) -> dict[str, int]:
    blocks = {
        f"{message['mid']}#{index}": block for message in messages for index, block in enumerate(message["blocks"])
    }
    first_owner: dict[str, str] = {}
    for key, block in blocks.items():
        if block["type"] == "tool_call":
            first_owner.setdefault(block["id"], key.split("#")[0])
    arcs_by_call: defaultdict[str, set[str]] = defaultdict(set)
    for arc in owners.values():
        arcs_by_call[arc.split("\0")[1]].add(arc)
    result: dict[str, int] = {}
    for tag in tags:
        if tag["kind"] != "tool":
            continue
        block = blocks.get(tag["block_id"])
        if block is not None:
            call_id = block["id"]
            result[f"{first_owner[call_id]}\0{call_id}"] = tag["tag_number"]
            continue
        legacy = arcs_by_call.get(tag["block_id"], set())
        if len(legacy) == 1:
            result[next(iter(legacy))] = tag["tag_number"]
    return result


def image_tokens(url: str) -> int:
    """Vision cost of a PNG data URL: ceil(width * height / 750), clamped to [1, 4500]."""
    header, _, payload = url.partition(",")
    if "image/png" not in header:
        return IMAGE_FALLBACK_TOKENS
    head = payload[:512]
    raw = base64.b64decode(head + "=" * (-len(head) % 4))
    if len(raw) < 24 or not raw.startswith(PNG_MAGIC):
        return IMAGE_FALLBACK_TOKENS
    width, height = (int(side) for side in struct.unpack(">II", raw[16:24]))
    if not width or not height:
        return IMAGE_FALLBACK_TOKENS
    return min(IMAGE_TOKEN_CAP, max(1, math.ceil(width * height / IMAGE_TOKEN_DIVISOR)))
