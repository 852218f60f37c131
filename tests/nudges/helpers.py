"""Small builders for hand-made tails: a word-counting tokenizer and a tail under construction."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field, replace

from ctxbus.agents.nudges import PartKind, TagKind, TagState, TailMeasure, TailPart, TailTag, TokenCounter


class WordCounter:
    """A fake tokenizer: one token per word. Records every text it was asked to count."""

    def __init__(self) -> None:
        self.counted: Counter[str] = Counter()

    def count(self, text: str) -> int:
        self.counted[text] += 1
        return len(text.split())


class RecordingCounter:
    """Wraps a real tokenizer and records every text it was asked to count."""

    def __init__(self, inner: TokenCounter) -> None:
        self._inner = inner
        self.counted: Counter[str] = Counter()

    def count(self, text: str) -> int:
        self.counted[text] += 1
        return self._inner.count(text)


def words(n: int, word: str = "w") -> str:
    """`n` tokens for `WordCounter`; distinct `word`s keep texts distinct."""
    return " ".join([word] * n)


@dataclass
class Tail:
    """A tail under construction; tag numbers are handed out in order."""

    parts: list[TailPart] = field(default_factory=list)
    tags: list[TailTag] = field(default_factory=list)

    def _next_tag(self) -> int:
        return self.tags[-1].number + 1 if self.tags else 1

    def text(self, tokens: int, *, tagged: bool = True, synthetic: bool = False, word: str = "t") -> int | None:
        number = self._next_tag() if tagged else None
        text = words(tokens, f"{word}{len(self.parts)}")
        self.parts.append(
            TailPart(key=f"p{len(self.parts)}", kind=PartKind.TEXT, text=text, tag=number, synthetic=synthetic)
        )
        if number is not None:
            self.tags.append(TailTag(number, TagKind.MESSAGE, tokens=tokens))
        return number

    def tool(self, name: str, output_tokens: int, *, input_tokens: int = 2, output: str | None = None) -> int:
        number = self._next_tag()
        arc = f"call-{number}"
        rendered = output if output is not None else words(output_tokens, f"o{number}")
        self.parts.append(
            TailPart(key=f"p{len(self.parts)}", kind=PartKind.TOOL_INPUT,
                     text=words(input_tokens, f"i{number}"), tag=number, arc=arc)
        )  # fmt: skip
        self.parts.append(
            TailPart(key=f"p{len(self.parts)}", kind=PartKind.TOOL_OUTPUT, text=rendered, tag=number, arc=arc)
        )
        self.tags.append(TailTag(number, TagKind.TOOL, tokens=input_tokens + output_tokens, tool_name=name))
        return number

    def extend(self, number: int, tokens: int) -> None:
        """Render one more part for tag `number`: more output for a tool, more text otherwise."""
        tag = next(tag for tag in self.tags if tag.number == number)
        tool = tag.kind is TagKind.TOOL
        self.parts.append(
            TailPart(
                key=f"p{len(self.parts)}",
                kind=PartKind.TOOL_OUTPUT if tool else PartKind.TEXT,
                text=words(tokens, f"x{len(self.parts)}"),
                tag=number,
                arc=f"call-{number}" if tool else None,
            )
        )

    def reasoning(self, tokens: int) -> None:
        self.parts.append(TailPart(key=f"p{len(self.parts)}", kind=PartKind.REASONING, text=words(tokens, "r")))

    def set_state(self, number: int, state: TagState) -> None:
        self.tags = [replace(tag, state=state) if tag.number == number else tag for tag in self.tags]

    def replace_output(self, number: int, text: str) -> None:
        """Re-render tag `number`'s tool output, as a compose that applied a drop would."""
        self.parts = [
            replace(part, text=text) if part.tag == number and part.kind is PartKind.TOOL_OUTPUT else part
            for part in self.parts
        ]


def measure_of(u: int, t: int) -> TailMeasure:
    """A measurement with only U and T, for Channel 1 tests that do not need a tail."""
    return TailMeasure(u=u, t=t, spent_outputs=0, hints=(), protected=frozenset(), full=True)
