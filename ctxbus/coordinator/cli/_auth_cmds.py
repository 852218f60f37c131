"""`ctxbus auth`: tenants, roles and credentials for a server that checks who connects."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ctxbus.coordinator.cli._app import command_set
from ctxbus.coordinator.cli._common import JsonOption, console, default_state_dir, print_json

if TYPE_CHECKING:
    from ctxbus.bus import AuthStore

__all__ = ["commands", "default_auth_dir", "TENANT_COORDINATOR"]

commands = command_set()

auth_app = typer.Typer(
    help="Tenants and roles: write the NATS config and each principal's credentials.",
    no_args_is_help=True,
    rich_markup_mode="markdown",
)
commands.add_typer(auth_app, name="auth")

TENANT_COORDINATOR = "coordinator"
"""The coordinator principal `add-tenant` makes with each tenant, which `ctxbus up --auth` runs."""


def default_auth_dir() -> Path:
    return default_state_dir() / "auth"


AuthDirOption = Annotated[
    Path | None,
    typer.Option("--dir", help="The auth directory \\[default: STATE_DIR/auth].", show_default=False, file_okay=False),
]


def _store(directory: Path | None) -> AuthStore:
    from ctxbus.bus import AuthStore  # imported here: `ctxbus --help` must not load the bus

    return AuthStore(directory or default_auth_dir())


@auth_app.command("init")
def init(directory: AuthDirOption = None) -> None:
    """Create an empty auth directory (mode 0700): no tenant yet.

    Then: `ctxbus auth add-tenant NAME` for each tenant (user), `ctxbus auth add-agent
    TENANT NAME` for each agent, and `ctxbus up --auth` to start NATS with them. Every
    other command connects as a principal: `ctxbus --credentials FILE ...` (or
    `CTXBUS_CREDENTIALS=FILE`).
    """
    from ctxbus.bus import AuthStore

    store = AuthStore.init(directory or default_auth_dir())
    console.print(f"auth directory {escape(str(store.path))} created; next: ctxbus auth add-tenant NAME")


@auth_app.command("add-tenant")
def add_tenant(
    tenant: Annotated[str, typer.Argument(help="The tenant: the first part of its domains (TENANT/session/task).")],
    directory: AuthDirOption = None,
) -> None:
    """Add a tenant: a NATS account of its own (its own log and buckets, which no other
    tenant can name), its commit-signing key, and its coordinator's credentials."""
    from ctxbus.bus import Role

    store = _store(directory)
    store.add_tenant(tenant)
    path = store.add_principal(tenant, TENANT_COORDINATOR, Role.COORDINATOR)
    console.print(f"tenant {escape(tenant)} added; its coordinator's credentials: {escape(str(path))}")
    _restart_hint()


TenantArgument = Annotated[str, typer.Argument(help="The tenant it works for.")]
NameArgument = Annotated[str, typer.Argument(help="Its name (for an agent: its agent id).")]


@auth_app.command("add-agent")
def add_agent(tenant: TenantArgument, name: NameArgument, directory: AuthDirOption = None) -> None:
    """Add an agent to a tenant: it may propose, read the log and snapshots, and write its
    own Channel 2 leases and heartbeats; nothing else."""
    _add(directory, tenant, name, "agent")


@auth_app.command("add-coordinator")
def add_coordinator(tenant: TenantArgument, name: NameArgument, directory: AuthDirOption = None) -> None:
    """Add another coordinator to a tenant (`add-tenant` makes the first): it serves
    proposals, writes the log and manages the streams."""
    _add(directory, tenant, name, "coordinator")


@auth_app.command("add-operator")
def add_operator(tenant: TenantArgument, name: NameArgument, directory: AuthDirOption = None) -> None:
    """Add an operator to a tenant: it may read status, metrics, the log, snapshots and presence."""
    _add(directory, tenant, name, "operator")


def _add(directory: Path | None, tenant: str, name: str, role: str) -> None:
    from ctxbus.bus import Role

    path = _store(directory).add_principal(tenant, name, Role(role))
    console.print(f"{role} {escape(name)} of {escape(tenant)} added; its credentials: {escape(str(path))}")
    console.print(f"connect with: ctxbus --credentials {escape(str(path))} ... (mode 0600: keep it so)")
    _restart_hint()


@auth_app.command("show")
def show(directory: AuthDirOption = None, as_json: JsonOption = False) -> None:
    """List the tenants and their principals, with the credentials file of each."""
    store = _store(directory)
    tenants = store.tenants()
    if as_json:
        print_json(
            {
                tenant: {name: {"role": role, "credentials": str(store.credentials_path(tenant, name))}
                         for name, role in principals.items()}
                for tenant, principals in tenants.items()
            }
        )  # fmt: skip
        return
    table = Table(title=f"auth directory {store.path}", show_edge=False, title_justify="left")
    for column in ("tenant", "principal", "role", "credentials"):
        table.add_column(column)
    for tenant, principals in tenants.items():
        for name, role in principals.items():
            table.add_row(tenant, name, role, str(store.credentials_path(tenant, name)))
    console.print(table)
    console.print(f"server config: {escape(str(store.accounts_file))}")


def _restart_hint() -> None:
    console.print("[dim]a running `ctxbus up --auth` or `ctxbus nats --auth` picks it up within seconds[/]")
