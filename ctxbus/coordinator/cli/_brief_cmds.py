"""Reading and changing the shared brief: `ctxbus brief show|propose`, `ctxbus log`."""

from __future__ import annotations

import json
import uuid
from typing import Annotated, Any

import anyio
import typer
from pydantic import ValidationError
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from ctxbus.bus import BriefLog, BriefState, Verb, close_quietly, connect, read_entry, run_async, subject
from ctxbus.coordinator.cli._app import command_set
from ctxbus.coordinator.cli._common import (
    DEFAULT_NATS_URL,
    DomainOption,
    JsonOption,
    NatsOption,
    bus_config,
    console,
    log_config_of,
    parse_agent_name,
    print_json,
    verifier_of,
)
from ctxbus.coordinator.cli._running import INTERRUPTED, until_signal
from ctxbus.schemas import (
    AGENT_OPS,
    KEY_MAX,
    BriefOp,
    BriefOpAdapter,
    Commit,
    Committed,
    Domain,
    TaskBrief,
    brief_hash,
    describe_validation_error,
    render_brief,
)

__all__ = ["commands"]

commands = command_set()

brief_app = typer.Typer(help="Show the shared brief of a task, or propose a change to it.", no_args_is_help=True)
commands.add_typer(brief_app, name="brief")

# Which field the positional VALUE fills, per operation: the first after `op`.
_MAIN_FIELD = {tag: next(name for name in model.model_fields if name != "op") for tag, model in AGENT_OPS.items()}


@brief_app.command("show")
def show(domain: DomainOption, nats: NatsOption = DEFAULT_NATS_URL, as_json: JsonOption = False) -> None:
    """Print the brief every agent of the task holds now."""
    run_async(_show, nats, domain, as_json)


async def _show(urls: str, domain: Domain, as_json: bool) -> None:
    bus = bus_config(urls, domain=domain)
    client = await connect(bus)
    try:
        state = await BriefLog(client, verifier=verifier_of(bus), txlog=log_config_of(bus)).load(domain)
    finally:
        await close_quietly(client)
    if as_json:
        print_json({"hash": brief_hash(state.brief), "seq": state.seq, "brief": state.brief.model_dump(mode="json")})
    else:
        console.print(render_brief(state.brief), markup=False)
        console.print(f"[dim]revision {state.brief.revision}, hash {brief_hash(state.brief)[:16]}[/]")


def _check_key(value: str | None) -> str | None:
    """Typer callback for `--key`: the proposal's schema would refuse it later, with a traceback."""
    if value is not None and not 1 <= len(value) <= KEY_MAX:
        raise typer.BadParameter(f"must be 1 to {KEY_MAX} characters long, got {len(value)}")
    return value


@brief_app.command("propose")
def propose(
    op: Annotated[str, typer.Argument(help=f"One of: {', '.join(_MAIN_FIELD)}.", show_default=False)],
    value: Annotated[str, typer.Argument(help="The text, option or item id the operation is about.")],
    domain: DomainOption,
    agent: Annotated[
        str, typer.Option("--agent", "-a", callback=parse_agent_name, help="Author of the proposal.")
    ] = "cli",
    reason: Annotated[str | None, typer.Option(help="Why (reject, reopen, remove_constraint, close).")] = None,
    outcome: Annotated[str | None, typer.Option(help="What came of it (complete).")] = None,
    rationale: Annotated[str | None, typer.Option(help="Why this option (add_decision).")] = None,
    supersedes: Annotated[str | None, typer.Option(help="Decision id replaced (add_decision).")] = None,
    key: Annotated[
        str | None,
        typer.Option(
            callback=_check_key,
            help=f"Idempotency key (1 to {KEY_MAX} characters): reuse it only to retry the same proposal; "
            "a key already committed for another change is refused (key_reused).",
        ),
    ] = None,
    nats: NatsOption = DEFAULT_NATS_URL,
    as_json: JsonOption = False,
) -> None:
    """Propose one change; prints whether the coordinator committed or rejected it.

    Examples: `ctxbus brief propose add_pending "write the migration" -d alice/s1/t1`,
    `ctxbus brief propose reject "redis lock" --reason "no redis in prod" -d alice/s1/t1`.
    """
    if op not in _MAIN_FIELD:
        raise typer.BadParameter(f"unknown operation {op!r}; use one of {', '.join(_MAIN_FIELD)}", param_hint="OP")
    fields: dict[str, Any] = {"op": op, _MAIN_FIELD[op]: value}
    extras = {"reason": reason, "outcome": outcome, "rationale": rationale, "supersedes": supersedes}
    for name, given in extras.items():
        if given is None:
            continue
        if name not in AGENT_OPS[op].model_fields:
            takers = [tag for tag, model in AGENT_OPS.items() if name in model.model_fields]
            only = f"only {', '.join(takers)} {'takes' if len(takers) == 1 else 'take'} it"
            raise typer.BadParameter(f"{op} takes no --{name} ({only})", param_hint=f"--{name}")
        fields[name] = given
    try:
        parsed = BriefOpAdapter.validate_python(fields)
    except ValidationError as exc:  # loc[0] is the op's tag
        problems = describe_validation_error(exc, skip=1, show_input=False)
        raise typer.BadParameter(problems, param_hint="OP/VALUE/options") from None
    code = run_async(_propose, nats, domain, agent, parsed, key, as_json)
    raise typer.Exit(code)


_PROPOSE_DEADLINE = 10.0
"""Seconds `brief propose` waits for a coordinator: a person is waiting at the prompt."""


async def _propose(urls: str, domain: Domain, agent: str, op: BriefOp, given_key: str | None, as_json: bool) -> int:
    from ctxbus.agents.brief import ProposalUnanswered, Proposer  # `brief show` and `log` need none of the agent side

    key = given_key or uuid.uuid4().hex
    bus = bus_config(urls, domain=domain)
    client = await connect(bus)
    try:
        proposer = Proposer(client, domain, agent_id=agent)
        reply = await proposer.propose(op, key=key, deadline=_PROPOSE_DEADLINE)
    except ProposalUnanswered as exc:
        raise ProposalUnanswered(
            exc.key, _PROPOSE_DEADLINE, retry=f"run the same command with --key {exc.key}"
        ) from None
    finally:
        await close_quietly(client)
    if as_json:
        print_json(reply.model_dump(mode="json"))
    elif isinstance(reply, Committed):
        console.print(f"[green]committed[/] at revision {reply.revision}{_duplicate_note(reply, given_key)}")
    else:
        console.print(f"[red]rejected[/] ({reply.code}): {escape(reply.reason)}")  # quotes what agents wrote
    return 0 if isinstance(reply, Committed) else 1


def _duplicate_note(reply: Committed, given_key: str | None) -> str:
    """What to add to "committed at revision N" when the coordinator had committed the
    proposal already: whose retry it was."""
    if not reply.duplicate:
        return ""
    if given_key is None:  # a fresh key: only this command's own attempts can have used it
        return " (its first answer was lost on the way: asked again, the coordinator said it had committed it, once)"
    return (
        f", earlier, under key {escape(repr(given_key))}: your retry changed nothing "
        "(a different change needs a new --key)"
    )


@commands.command("log")
def log_command(
    domain: DomainOption,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new commits until Ctrl-C.")] = False,
    nats: NatsOption = DEFAULT_NATS_URL,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object per commit.")] = False,
) -> None:
    """Print the task's transaction log: every commit, in order."""
    finished = run_async(until_signal, lambda: _log(nats, domain, follow, as_json))
    if not finished and not follow:  # `-f` ends with Ctrl-C: exit 0; the whole log was cut short
        raise typer.Exit(INTERRUPTED)


async def _log(urls: str, domain: Domain, follow: bool, as_json: bool) -> None:
    bus = bus_config(urls, domain=domain)
    client = await connect(bus)
    brief_log = BriefLog(client, verifier=verifier_of(bus), txlog=log_config_of(bus))
    tx = subject(domain, Verb.TX)
    entries = brief_log.txlog.follow(tx) if follow else brief_log.txlog.read(tx)
    table = _log_table()
    state = BriefState(TaskBrief(domain=domain), 0)

    def emit(record: dict[str, Any], row: tuple[str, str, str, str]) -> None:
        cells = [Text(cell) for cell in row]  # what agents wrote: a `[` in it is not markup
        if as_json:  # JSON Lines: one compact object per commit, for pipes
            typer.echo(json.dumps(record))
        elif follow:
            console.print(*cells)
        else:
            table.add_row(*cells)

    try:
        async for entry in entries:
            # As every replica reads it: an entry they skip is shown skipped, with why.
            unsigned = brief_log.unsigned(entry)
            outcome = read_entry(state, entry) if unsigned is None else None
            skipped = unsigned if outcome is None else outcome.skipped
            if outcome is None or skipped is not None:
                state = BriefState(state.brief, entry.seq)
                emit({"seq": entry.seq, "skipped": skipped}, ("-", "", "skipped", f"log entry {entry.seq}: {skipped}"))
                continue
            state = outcome.state
            for commit in outcome.commits:
                emit({"seq": entry.seq, **commit.model_dump(mode="json")}, _log_row(commit))
            for commit in outcome.idle:
                why = "no effect: every replica moves past it (a key already committed, an item gone, a closed domain)"
                emit(
                    {"seq": entry.seq, **commit.model_dump(mode="json"), "no_effect": True},
                    (*_log_row(commit)[:3], why),
                )
    finally:
        with anyio.CancelScope(shield=True):
            await entries.aclose()
            await close_quietly(client)
    if not as_json and not follow:
        console.print(table)


def _log_table() -> Table:
    table = Table(show_edge=False, pad_edge=False)
    for column in ("rev", "author", "op", "detail"):
        table.add_column(column)
    return table


def _log_row(commit: Commit) -> tuple[str, str, str, str]:
    fields = commit.op.model_dump(exclude={"op"})
    detail = "; ".join(f"{k}={v!r}" for k, v in fields.items() if v not in ("", None))
    return (str(commit.revision), commit.author, commit.op.op, detail)
