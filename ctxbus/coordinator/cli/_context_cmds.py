"""Looking at contexts: `ctxbus replay` of recorded sessions, `ctxbus inspect` of an agent."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ctxbus.agents.context import PRICE_PRESETS, Tokenizer, authored_note
from ctxbus.agents.runtime import ReplayReport, inspect_store, replay_transcript
from ctxbus.coordinator.cli._app import command_set
from ctxbus.coordinator.cli._common import (
    DomainOption,
    JsonOption,
    agent_store,
    console,
    parse_agent_name,
    print_json,
)

__all__ = ["commands"]

commands = command_set()


@commands.command()
def replay(
    files: Annotated[
        list[Path],
        typer.Argument(
            exists=True,
            dir_okay=False,
            readable=True,
            metavar="FILE.jsonl...",
            help="Transcripts, one message per line.",
        ),
    ],
    budget: Annotated[int, typer.Option("--budget", "-b", min=4096, help="Context window in tokens.")] = 16_000,
    as_json: JsonOption = False,
) -> None:
    """Run recorded sessions through a local context: savings, bands, what was trimmed.

    Takes the JSON Lines format of shared/anchors/transcripts: one object per line with
    role (system, user, assistant, tool), content, tool_name and tool_call_id. The context
    composes before every assistant message, as an agent would, and compares each prompt
    with sending the full history.
    """
    tokenizer = Tokenizer.load()
    reports: list[ReplayReport] = []
    with tempfile.TemporaryDirectory(prefix="ctxbus-replay-") as tmp:
        for i, path in enumerate(files):
            if not as_json:
                console.print(f"[dim]replaying {escape(path.name)}...[/]")
            reports.append(replay_transcript(path, budget=budget, store=Path(tmp) / f"{i}.db", tokenizer=tokenizer))
    if as_json:
        print_json([r.as_dict() for r in reports])
        return
    table = Table(title=f"replay at a {budget:,}-token window", show_edge=False)
    columns = ("session", "messages", "mean prompt", "mean full history", "saved", "cached", "cost vs full")
    for column in (*columns, "highest band", "trims"):
        table.add_column(column, justify="left" if column in ("session", "highest band", "trims") else "right")
    for r in reports:
        trims = ", ".join(f"{n} {what}" for what, n in r.trims.most_common(3)) or "none"
        table.add_row(
            Text(Path(r.file).name),
            f"{r.messages:,}",
            f"{r.mean_prompt:,.0f}",
            f"{r.mean_history:,.0f}",
            f"{r.saving:.0%}",
            f"{r.cache.cached_share:.0%}" if r.cache else "-",
            " / ".join(f"{r.cost(preset):.2f}x" for preset in PRICE_PRESETS),
            r.highest_band,
            trims,
        )
    console.print(table)
    presets = "; ".join(f"{name} (write {p.write}x, read {p.read}x)" for name, p in PRICE_PRESETS.items())
    console.print(
        f"[dim]cached: prompt tokens a provider's cache serves (the prefix repeated from the call before); "
        f"cost vs full: input cost against sending the full history every call, with caching, under {presets}[/]"
    )


@commands.command()
def inspect(
    agent: Annotated[str, typer.Argument(callback=parse_agent_name, help="The agent's id.")],
    domain: DomainOption,
    store: Annotated[
        Path | None,
        typer.Option(help="The agent's SQLite file \\[default: STATE_DIR/agents/USER/SESSION/TASK/AGENT.db]."),
    ] = None,
    full: Annotated[bool, typer.Option("--full", help="Print every item in full, not just its first line.")] = False,
    as_json: JsonOption = False,
) -> None:
    """Show what an agent's model sees, layer by layer, with token counts.

    Reads a consistent copy of the agent's store, so a running agent is not disturbed.
    For an agent in a host that owns the conversation (an MCP client, Claude Code), this
    is what ctxbus holds for it, not the host's own context: see the note it ends with.
    An agent that only Claude Code's hooks ran is read from their store
    (AGENT.claude-code.db).
    """
    from ctxbus.agents.hooks import hooks_store

    path = store or agent_store(domain, agent)
    hooks = hooks_store(agent_store(domain, agent))
    if store is None and not path.is_file() and hooks.is_file():
        path = hooks  # an agent only Claude Code's hooks ran
    if not path.is_file():
        raise typer.BadParameter(
            f"no store of agent {agent!r} at {path}: agents run with `ctxbus mcp`, Claude Code's hooks or the "
            "Agent runtime keep one (a swarm demo's are under <data dir>/agents/); point at it with --store",
            param_hint="AGENT",
        )
    layers = inspect_store(path, domain)
    if as_json:
        print_json([v.as_dict() for v in layers])
        return
    for view in layers:
        console.rule(f"{view.name}: {view.tokens:,} / {view.budget:,} tokens, {len(view.items)} items")
        if view.name == "authored" and view.items:
            console.print(f"[dim]{escape(authored_note(layers))}[/]")
        for item in view.items:
            text = item.text if full else (item.text.splitlines() or [""])[0][:160]
            tag = f"§{item.tag}§ " if item.tag is not None else ""
            console.print(f"[dim]{tag}{item.kind} ({item.tokens:,})[/] {escape(text)}")
    console.print(_CANNOT_SEE)
    if path != hooks and hooks.is_file():
        console.print(
            f"[dim]What Claude Code's hooks recorded for this agent (the user's prompts, the host's tool results) is "
            f"in {escape(str(hooks))}: `ctxbus inspect {agent} --store {escape(str(hooks))}` shows it.[/]"
        )


_CANNOT_SEE = """\
[dim]This is what ctxbus holds for the agent, composed as ctxbus would send it. An agent that runs in a host
which owns the conversation (an MCP client, Claude Code) is seen only in part: through MCP, the calls to
ctxbus's own tools and their results; through Claude Code's hooks (`ctxbus hook install`), also the user's
prompts and every tool's result. ctxbus never sees the host's own system prompt (the system layer above is
ctxbus's), the model's replies, or what the host dropped or compacted.[/]"""
