"""What every `ctxbus` command shares: options, console output, errors, async entry."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import platformdirs
import typer
from rich.console import Console

from ctxbus.schemas import Domain, InvalidDomain, describe_validation_error, validate_token

if TYPE_CHECKING:
    from ctxbus.bus import BusConfig, Credentials, TxLogConfig, Verifier
    from ctxbus.coordinator import CoordinatorConfig

# What only some commands use is imported where it is used: a command imports only
# what it needs (`bench/cli.py`).

__all__ = [
    "CREDENTIALS_ENV",
    "DEFAULT_NATS_URL",
    "NatsOption",
    "DomainOption",
    "domain_filter",
    "JsonOption",
    "console",
    "errors",
    "default_state_dir",
    "agent_store",
    "bus_config",
    "parse_agent_name",
    "parse_domain",
    "print_json",
    "verifier_of",
]

DEFAULT_NATS_URL: Final = "nats://127.0.0.1:4222"
"""Where `ctxbus up` and `ctxbus nats` listen by default."""

PIPE_WIDTH: Final = 200
"""Columns of output that goes to a file or a pipe rather than a terminal: wide enough
for every table ctxbus draws (the swarm report is about 160)."""


def _console(*, stderr: bool = False) -> Console:
    """A console for output that reads well where it lands.

    On a terminal, rich fits it to the screen. Written to a file or a pipe (a CI log,
    `| grep`, `| less`), rich would still wrap every line at 80 columns and squeeze
    tables into them, cutting names to `age…`: there it wraps nothing and gives tables
    `PIPE_WIDTH`. A `COLUMNS` set in the environment wins, as rich reads it.
    """
    stream = sys.stderr if stderr else sys.stdout
    piped = not stream.isatty() and "COLUMNS" not in os.environ
    return Console(stderr=stderr, highlight=False, soft_wrap=piped, width=PIPE_WIDTH if piped else None)


console = _console()
errors = _console(stderr=True)


def default_state_dir() -> Path:
    """`$CTXBUS_STATE_DIR`, else the platform's per-user state directory."""
    configured = os.environ.get("CTXBUS_STATE_DIR")
    return Path(configured) if configured else Path(platformdirs.user_state_dir("ctxbus"))


def agent_store(domain: Domain, agent: str) -> Path:
    """The SQLite file of an agent started by ctxbus: `<state dir>/agents/USER/SESSION/TASK/AGENT.db`."""
    return default_state_dir().joinpath("agents", *domain.tokens, f"{agent}.db")


def parse_domain(text: str) -> Domain:
    """Typer parser for `user/session/task`."""
    try:
        return Domain.parse(text)
    except InvalidDomain as exc:
        raise typer.BadParameter(str(exc)) from None


def parse_agent_name(value: str) -> str:
    """Typer callback for an agent id: it names a file and a KV key, so it is one token."""
    try:
        return validate_token(value, field="agent name")
    except InvalidDomain as exc:
        raise typer.BadParameter(str(exc)) from None


NatsOption = Annotated[
    str,
    typer.Option(
        "--nats",
        envvar="CTXBUS_NATS_URL",
        metavar="URL[,URL...]",
        help="NATS server URL(s); several for a cluster.",
        show_default=True,
    ),
]
DomainOption = Annotated[
    Domain,
    typer.Option(
        "--domain",
        "-d",
        envvar="CTXBUS_DOMAIN",
        metavar="USER/SESSION/TASK",
        parser=parse_domain,
        help="The task's domain, e.g. alice/s1/cache-fix.",
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")]


def domain_filter(help: str) -> Any:
    """An optional `--domain` (`-d`, `CTXBUS_DOMAIN`), for commands that show one task or
    every one: use as `Annotated[Domain | None, domain_filter("...")] = None`."""
    return typer.Option(
        "--domain", "-d", envvar="CTXBUS_DOMAIN", metavar="USER/SESSION/TASK", parser=parse_domain, help=help
    )


CREDENTIALS_ENV: Final = "CTXBUS_CREDENTIALS"
"""Where `ctxbus --credentials FILE` (or the caller) puts the credentials every command,
and every process a command starts, connects with."""


def bus_config(urls: str, *, name: str = "ctxbus-cli", domain: Domain | None = None) -> BusConfig:
    """A `BusConfig` from a `--nats` value and the credentials of `--credentials` (or
    `$CTXBUS_CREDENTIALS`); a bad URL, or none, is a usage error, and so is a `domain`
    of another tenant than the credentials' (the server would refuse every request, or
    answer from an account that holds none of it: an empty brief, a wait for nobody)."""
    from pydantic import ValidationError

    from ctxbus.bus import BusConfig

    if not urls.strip():
        raise typer.BadParameter(
            f"no server URL given; start one with `ctxbus up` (it listens on {DEFAULT_NATS_URL})", param_hint="--nats"
        )
    try:
        config = BusConfig.from_urls(urls, name=name)
    except ValidationError as exc:
        # The messages quote the bad URL; the field (`servers`) means nothing to a user.
        message = describe_validation_error(exc, skip=1, show_input=False)
        raise typer.BadParameter(message, param_hint="--nats") from None
    credentials = os.environ.get(CREDENTIALS_ENV)
    if credentials:
        from ctxbus.bus import Credentials

        config = config.model_copy(update={"credentials": Credentials.load(credentials)})
        tenant = config.credentials.tenant if config.credentials is not None else None
        if domain is not None and tenant is not None and domain.user != tenant:
            raise typer.BadParameter(
                f"{domain} belongs to {domain.user!r}, and these credentials are tenant {tenant!r}'s "
                f"(from ${CREDENTIALS_ENV} or --credentials): they reach {tenant}/... domains only",
                param_hint="--domain",
            )
    return config


def verifier_of(config: BusConfig) -> Verifier | None:
    """The keys a command connected as a principal trusts to have signed the log and
    its answers (its credentials'); None without credentials: it believes any."""
    from ctxbus.bus import Verifier

    if config.credentials is None or not config.credentials.trusted_signers:
        return None
    return Verifier(config.credentials.trusted_signers)


def log_config_of(config: BusConfig) -> TxLogConfig:
    """How a command connected as a principal reads the log: an agent's credentials
    may not create consumers, so it reads with direct gets only."""
    from ctxbus.bus import Role, TxLogConfig

    return TxLogConfig(consumers=config.credentials is None or config.credentials.role is not Role.AGENT)


def print_json(value: object) -> None:
    """Machine-readable output for `--json`."""
    console.print_json(json.dumps(value, default=str))


def coordinator_config(
    coordinator_id: str | None, brief_budget: int | None = None, *, credentials: Credentials | None = None
) -> CoordinatorConfig:
    """A coordinator's settings as the commands give them: a brief budget (0: none; None:
    the coordinator's default), counted with the agents' tokenizer; and, with a
    coordinator's credentials, its tenant's key to sign the log and its answers with,
    and the keys to trust."""
    from ctxbus.agents.context import Tokenizer
    from ctxbus.bus import Signer, Verifier
    from ctxbus.coordinator._config import DEFAULT_BRIEF_BUDGET, CoordinatorConfig

    if brief_budget is None:
        brief_budget = DEFAULT_BRIEF_BUDGET
    config = CoordinatorConfig()
    if coordinator_id:
        config = dataclasses.replace(config, coordinator_id=coordinator_id)
    if brief_budget:
        config = dataclasses.replace(
            config, brief_budget_tokens=brief_budget, count_tokens=Tokenizer.load().count_lines
        )
    if credentials is not None and credentials.signing_seed is not None:
        config = dataclasses.replace(config, signer=Signer(credentials.signing_seed))
    if credentials is not None and credentials.trusted_signers:
        config = dataclasses.replace(config, verifier=Verifier(credentials.trusted_signers))
    return config
