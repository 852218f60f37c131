"""Tenants and roles the server enforces: one NATS account per tenant, nkey principals,
and permissions that let each role do exactly its job.

Tenants are NATS accounts: each has its own subjects and its own JetStream (its own log
and buckets), so one tenant cannot even name another's data. Inside a tenant, the
server's permissions keep the roles apart:

- a **coordinator** serves the proposal queue group, publishes on the log subjects,
  answers requests (`allow_responses`) and manages the streams and buckets;
- an **agent** publishes proposals, reads the log and the snapshots with direct gets
  (the calls a replica makes), and writes only its own lease and presence keys: it
  cannot publish on a log subject, purge or delete, create or delete a consumer,
  subscribe to proposals, or answer anyone's request. It may not create consumers
  because a push consumer delivers to any subject its creator names (the proposal
  queue, another client's inbox), and no permission can restrict that;
- an **operator** reads: status and metrics, the log, snapshots and presence; it may
  create an ephemeral consumer on the log (`ctxbus log --follow`), not delete one.

Replies: every principal receives only on its own inbox prefix
(`_INBOX.<tenant>.<name>.>`, set as the client's inbox prefix by `Credentials`), and only
coordinators may answer requests, and only the requests they received. An agent can
neither read another's answers nor answer in a coordinator's place. (NATS does not
check the reply subject a request names: anyone may ask for an answer to be sent to
another's inbox, one answer per request. So answers are signed and matched to their
request by whoever receives them, and coordinators dead-letter what is not a proposal.)

`AuthStore` keeps a directory: the registry (tenants, principals and their public keys),
each tenant's commit-signing key, one credentials file per principal (mode 0600), and
`accounts.conf`, the nats-server configuration made from the registry.
"""

from __future__ import annotations

import json
import os
import stat
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ctxbus.bus._keys import new_seed, public_key_of
from ctxbus.bus._subjects import (
    BRIEF_BUCKET,
    COORDINATORS_BUCKET,
    GLOBAL_DLQ,
    LEASE_BUCKET,
    LIVE_ROOT,
    METRICS_SUBJECT,
    PRESENCE_BUCKET,
    PROPOSE_QUEUE,
    STATUS_SUBJECT,
    SUBJECT_ROOT,
    TX_STREAM,
)
from ctxbus.schemas import UsageError, describe_validation_error, validate_token

__all__ = [
    "ACCOUNTS_FILE",
    "PROBE_ACCOUNT",
    "PROBE_USER",
    "AuthStore",
    "Credentials",
    "CredentialsError",
    "Role",
    "inbox_prefix",
    "permissions",
]

ACCOUNTS_FILE: Final = "accounts.conf"
"""The nats-server configuration an `AuthStore` writes (include it from a server config)."""
_REGISTRY_FILE: Final = "registry.json"
_CREDENTIALS_DIR: Final = "credentials"
_SIGNING_DIR: Final = "signing"
_PRIVATE: Final = 0o600
_PRIVATE_DIR: Final = 0o700
_INBOX_ROOT: Final = "_INBOX"
PROBE_ACCOUNT: Final = "CTXBUS_PROBE"
"""An account no tenant may be named: the one whose only user asks whether JetStream is up."""
PROBE_USER: Final = "probe"


class CredentialsError(UsageError):
    """Raised when a credentials file or an auth directory cannot be used: missing,
    unreadable, malformed, or readable by others."""


class Role(StrEnum):
    """What a principal may do; see the module docstring."""

    COORDINATOR = "coordinator"
    AGENT = "agent"
    OPERATOR = "operator"


def inbox_prefix(tenant: str, name: str) -> str:
    """The only subjects `name` of `tenant` receives answers on, as `<prefix>.<id>`."""
    return f"{_INBOX_ROOT}.{tenant}.{name}"


def _kv(bucket: str, *tokens: str) -> str:
    return ".".join((f"$KV.{bucket}", *tokens))


def _direct_get(stream: str) -> list[str]:
    # A direct get by subject goes to `...GET.<stream>` with the subject in its body,
    # a get of a key's last value to `...GET.<stream>.<subject>`.
    return [f"$JS.API.DIRECT.GET.{stream}", f"$JS.API.DIRECT.GET.{stream}.>", f"$JS.API.STREAM.MSG.GET.{stream}"]


def _reader(stream: str) -> list[str]:
    """The JetStream calls that read `stream`: gets and its info."""
    return [*_direct_get(stream), f"$JS.API.STREAM.INFO.{stream}"]


def _follower(stream: str) -> list[str]:
    """`_reader`, and an ephemeral ordered consumer (`ctxbus log --follow`): created
    without a name in the subject, never deleted by name (the server drops it when
    its subscriber goes). Not for agents: a consumer delivers to whatever subject its
    creator names, and no permission can restrict that (see `TxLogConfig.consumers`)."""
    return [*_reader(stream), f"$JS.API.CONSUMER.CREATE.{stream}", f"$JS.FC.{stream}.>"]


def permissions(role: Role, tenant: str, name: str) -> dict[str, Any]:
    """The nats-server `permissions` block of principal `name` of `tenant`.

    Everything is an allow list: what is not named is refused by the server (the
    client gets a permissions violation, and the message goes nowhere).
    """
    validate_token(tenant, field="tenant")
    validate_token(name, field="principal name")
    domains = f"{SUBJECT_ROOT}.{tenant}"
    inbox = f"{inbox_prefix(tenant, name)}.>"
    live = f"{LIVE_ROOT}.{TX_STREAM}.{domains}.>"
    log, briefs = TX_STREAM, f"KV_{BRIEF_BUCKET}"
    leases, presence = f"KV_{LEASE_BUCKET}", f"KV_{PRESENCE_BUCKET}"
    coordinators = f"KV_{COORDINATORS_BUCKET}"
    match role:
        case Role.COORDINATOR:
            return {
                "publish": {
                    "allow": [f"{domains}.>", "$JS.API.>", "$KV.>", "$JS.FC.>", "$JS.ACK.>", GLOBAL_DLQ, "_INBOX.>"]
                },
                "subscribe": {
                    "allow": [
                        # Every domain of the account: the account is the tenant.
                        f"{SUBJECT_ROOT}.*.*.*.propose {PROPOSE_QUEUE}",
                        f"{SUBJECT_ROOT}.*.*.*.propose.*",
                        STATUS_SUBJECT,
                        METRICS_SUBJECT,
                        live,
                        inbox,
                    ]
                },
                "allow_responses": True,
            }
        case Role.AGENT:
            return {
                "publish": {
                    "allow": [
                        f"{domains}.*.*.propose",
                        f"{domains}.*.*.propose.*",
                        *_reader(log),
                        *_direct_get(briefs),
                        f"$JS.API.STREAM.INFO.{briefs}",
                        *_direct_get(leases),
                        f"$JS.API.STREAM.INFO.{leases}",
                        f"$JS.API.STREAM.INFO.{presence}",
                        _kv(LEASE_BUCKET, tenant, "*", "*", name, ">"),
                        _kv(PRESENCE_BUCKET, tenant, "*", "*", name),
                    ]
                },
                "subscribe": {"allow": [inbox, live]},
            }
        case Role.OPERATOR:
            return {
                "publish": {
                    "allow": [
                        STATUS_SUBJECT,
                        METRICS_SUBJECT,
                        *_follower(log),
                        *_direct_get(briefs),
                        f"$JS.API.STREAM.INFO.{briefs}",
                        *_reader(presence),
                        *_reader(coordinators),
                    ]
                },
                "subscribe": {"allow": [inbox, live, f"{domains}.*.*.dlq", GLOBAL_DLQ]},
            }


class Credentials(BaseModel):
    """What a principal connects with: its identity, its nkey seed, its inbox prefix,
    and the keys it trusts to have signed the log and the answers it gets.

    Stored as JSON, mode 0600 (`AuthStore` writes them; `load` refuses one others can
    read). Coordinators also hold their tenant's signing seed.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    tenant: Annotated[str, Field(min_length=1)]
    name: Annotated[str, Field(min_length=1)]
    role: Role
    seed: str = Field(repr=False)
    """The principal's nkey user seed (`SU...`), which authenticates it to the server."""
    signing_seed: str | None = Field(default=None, repr=False)
    """The tenant's commit-signing seed; coordinators only."""
    trusted_signers: tuple[str, ...] = ()
    """Public keys whose signatures on log entries and answers are accepted."""
    servers: tuple[str, ...] = ()
    """Server URLs to use when a command is given none (written by `auth init`)."""

    @field_validator("tenant", "name")
    @classmethod
    def _token(cls, value: str) -> str:
        validate_token(value, field="tenant or principal name")
        return value

    @property
    def inbox_prefix(self) -> str:
        return inbox_prefix(self.tenant, self.name)

    @property
    def public_key(self) -> str:
        return public_key_of(self.seed)

    @classmethod
    def load(cls, path: Path | str) -> Credentials:
        """Read a credentials file.

        :raises CredentialsError: if it is missing, unreadable, not valid, or readable
            by anyone but its owner.
        """
        path = Path(path)
        try:
            mode = path.stat().st_mode
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise CredentialsError(f"cannot read credentials {path}: {exc.strerror or exc}") from None
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise CredentialsError(
                f"credentials {path} can be read by others (mode {stat.S_IMODE(mode):o}): "
                f"it holds a private key; `chmod 600 {path}`"
            )
        try:
            return cls.model_validate_json(text)
        except ValidationError as exc:
            raise CredentialsError(
                f"{path} is not a ctxbus credentials file: {describe_validation_error(exc)}"
            ) from None

    def save(self, path: Path) -> None:
        """Write as JSON, mode 0600 from its first byte."""
        _write_private(path, self.model_dump_json(indent=2) + "\n")


class _Principal(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    role: Role
    public_key: str


class _Tenant(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    signing_key: str
    """The public key the tenant's coordinators sign with."""
    principals: dict[str, _Principal] = Field(default_factory=dict)


class _Registry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    version: Literal[1] = 1
    servers: tuple[str, ...] = ()
    tenants: dict[str, _Tenant] = Field(default_factory=dict)


class AuthStore:
    """A directory of tenants and principals, and the server configuration made of it.

    ::

        <dir>/registry.json                     tenants, principals, public keys
        <dir>/accounts.conf                     for nats-server (`include` it)
        <dir>/signing/<tenant>.seed             the tenant's commit-signing seed (0600)
        <dir>/credentials/<tenant>/<name>.json  one principal's credentials (0600)
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def __repr__(self) -> str:
        return f"<AuthStore {str(self.path)!r}>"

    @property
    def accounts_file(self) -> Path:
        return self.path / ACCOUNTS_FILE

    @classmethod
    def init(cls, path: Path | str, *, servers: tuple[str, ...] = ()) -> AuthStore:
        """Create an empty store at `path` (a new or empty directory).

        :raises CredentialsError: if `path` holds a store already, or anything else.
        """
        store = cls(path)
        if store.path.exists() and any(store.path.iterdir()):
            raise CredentialsError(f"{store.path} is not empty; give `auth init` a new directory")
        store.path.mkdir(parents=True, exist_ok=True, mode=_PRIVATE_DIR)
        os.chmod(store.path, _PRIVATE_DIR)
        store._save(_Registry(servers=servers))
        return store

    def tenants(self) -> dict[str, dict[str, Role]]:
        """Every tenant, and the role of each of its principals."""
        return {
            name: {p: principal.role for p, principal in tenant.principals.items()}
            for name, tenant in self._load().tenants.items()
        }

    def add_tenant(self, tenant: str) -> None:
        """Add a tenant (a NATS account with its own JetStream) and its signing key.

        :raises CredentialsError: if it exists already.
        """
        validate_token(tenant, field="tenant")
        if tenant == PROBE_ACCOUNT:
            raise CredentialsError(f"{PROBE_ACCOUNT} is the server's own account; name the tenant otherwise")
        registry = self._load()
        if tenant in registry.tenants:
            raise CredentialsError(f"tenant {tenant!r} exists already in {self.path}")
        seed = new_seed()
        _write_private(self._signing_seed_path(tenant), seed + "\n")
        tenants = {**registry.tenants, tenant: _Tenant(signing_key=public_key_of(seed))}
        self._save(registry.model_copy(update={"tenants": tenants}))

    def add_principal(self, tenant: str, name: str, role: Role) -> Path:
        """Add a coordinator, agent or operator to `tenant`; returns its credentials file.

        :raises CredentialsError: if the tenant is unknown or the name taken.
        """
        validate_token(name, field="principal name")
        registry = self._load()
        known = registry.tenants.get(tenant)
        if known is None:
            raise CredentialsError(
                f"no tenant {tenant!r} in {self.path}; add it with `ctxbus auth add-tenant {tenant}`"
            )
        if name in known.principals:
            raise CredentialsError(f"{tenant} has a principal named {name!r} already")
        seed = new_seed()
        signing = self._signing_seed_path(tenant).read_text().strip() if role is Role.COORDINATOR else None
        credentials = Credentials(
            tenant=tenant,
            name=name,
            role=role,
            seed=seed,
            signing_seed=signing,
            trusted_signers=(known.signing_key,),
            servers=registry.servers,
        )
        path = self.credentials_path(tenant, name)
        credentials.save(path)
        principals = {**known.principals, name: _Principal(role=role, public_key=public_key_of(seed))}
        tenants = {**registry.tenants, tenant: known.model_copy(update={"principals": principals})}
        self._save(registry.model_copy(update={"tenants": tenants}))
        return path

    def credentials_path(self, tenant: str, name: str) -> Path:
        return self.path / _CREDENTIALS_DIR / tenant / f"{name}.json"

    def credentials(self, tenant: str, name: str) -> Credentials:
        return Credentials.load(self.credentials_path(tenant, name))

    def server_config(self, *, probe_password: str | None = None) -> str:
        """The `accounts` block for nats-server: one account per tenant, JetStream on,
        each principal an nkey user with its role's permissions.

        :param probe_password: also an account of its own, `PROBE_ACCOUNT`, with one
            user (`probe`, this password) who may only ask whether JetStream is up: for
            the process that starts the server (`EmbeddedServer`).
        """
        return _server_config(self._load(), probe_password=probe_password)

    def _signing_seed_path(self, tenant: str) -> Path:
        return self.path / _SIGNING_DIR / f"{tenant}.seed"

    def _load(self) -> _Registry:
        path = self.path / _REGISTRY_FILE
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CredentialsError(
                f"{self.path} is not a ctxbus auth directory (no {_REGISTRY_FILE}); create one with `ctxbus auth init`"
            ) from None
        except OSError as exc:
            raise CredentialsError(f"cannot read {path}: {exc.strerror or exc}") from None
        try:
            return _Registry.model_validate_json(text)
        except ValidationError as exc:
            raise CredentialsError(f"{path} is not a ctxbus auth registry: {describe_validation_error(exc)}") from None

    def _save(self, registry: _Registry) -> None:
        _write_private(self.path / _REGISTRY_FILE, registry.model_dump_json(indent=2) + "\n")
        _write_private(self.accounts_file, _server_config(registry))


def _server_config(registry: _Registry, *, probe_password: str | None = None) -> str:
    accounts: dict[str, Any] = {}
    if probe_password is not None:
        probe_permissions = {"publish": {"allow": ["$JS.API.INFO"]}, "subscribe": {"allow": ["_INBOX.>"]}}
        accounts[PROBE_ACCOUNT] = {
            "jetstream": "enabled",
            "users": [{"user": PROBE_USER, "password": probe_password, "permissions": probe_permissions}],
        }
    for tenant, known in registry.tenants.items():
        users = [
            {"nkey": p.public_key, "permissions": permissions(p.role, tenant, name)}
            for name, p in sorted(known.principals.items())
        ]
        accounts[tenant] = {"jetstream": "enabled", "users": users}
    # JSON is nats-server configuration syntax too.
    return f"# Written by `ctxbus auth`; change it with `ctxbus auth`, not by hand.\naccounts: {json.dumps(accounts, indent=2)}\n"


def _write_private(path: Path, text: str) -> None:
    """Write `text` to `path` through a file created 0600 (never readable by others, not
    even for a moment), replacing it whole."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=_PRIVATE_DIR)
    temporary = path.with_name(f".{path.name}.tmp")
    fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, _PRIVATE)
    try:
        os.fchmod(fd, _PRIVATE)
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(temporary, path)
