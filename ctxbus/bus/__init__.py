"""Everything NATS: embedded server, connection, subjects, transaction log, leases.

Only this package imports `nats`; NATS exceptions are translated to `BusError`
subclasses here, so callers never catch `nats.*`.

Names are imported on first use, as in `ctxbus.coordinator`: a process that needs
`PidLock` or `run_async` alone (a Claude Code hook without NATS) does not wait for nats,
the keys or the log to load.
"""

import typing as _typing

from ctxbus._lazy import lazy_names as _lazy_names

if _typing.TYPE_CHECKING:
    from ctxbus.bus._auth import AuthStore, Credentials, CredentialsError, Role
    from ctxbus.bus._brief_log import BriefLog, BriefState, EntryOutcome, batch_msg_id, commits_of, read_entry
    from ctxbus.bus._cluster import LoopbackCluster
    from ctxbus.bus._connection import (
        DEFAULT_CONNECT_DEADLINE,
        BusConfig,
        NatsClient,
        TlsConfig,
        close_quietly,
        connect,
    )
    from ctxbus.bus._errors import (
        AppendExpired,
        BusError,
        BusUnavailable,
        CasConflict,
        LeaseHeld,
        LogTruncated,
        NoResponders,
        NotAuthorized,
        NotFound,
        Refused,
        ServerError,
        StreamMissing,
        Unsigned,
    )
    from ctxbus.bus._event_loop import (
        NO_UVLOOP_ENV,
        STOP_SIGNALS,
        anyio_backend,
        event_loop_name,
        run_async,
        uses_uvloop,
    )
    from ctxbus.bus._keys import KeyInvalid, Signer, Verifier
    from ctxbus.bus._kv import Bucket, BucketConfig, KvEntry
    from ctxbus.bus._leases import Lease, LeaseConfig, Leases
    from ctxbus.bus._lifecycle import ProcessGroup
    from ctxbus.bus._logging import DEFAULT_REPEAT_WINDOW, RepeatFilter
    from ctxbus.bus._pid_lock import PidLock
    from ctxbus.bus._retry import Retry
    from ctxbus.bus._rpc import Handler, Listener, Request, gather, listen, publish, request, serve
    from ctxbus.bus._server import DEFAULT_SYNC_INTERVAL, EmbeddedServer, find_nats_server, free_port
    from ctxbus.bus._streams import may_pass
    from ctxbus.bus._subjects import (
        BRIEF_BUCKET,
        COORDINATORS_BUCKET,
        GLOBAL_DLQ,
        LEASE_BUCKET,
        METRICS_SUBJECT,
        PRESENCE_BUCKET,
        PROPOSE_QUEUE,
        STATUS_SUBJECT,
        SUBJECT_ROOT,
        TX_STREAM,
        TX_SUBJECTS,
        Verb,
        all_domains,
        coordinator_key,
        domain_of,
        kv_key,
        live_subject,
        routed,
        subject,
    )
    from ctxbus.bus._tracing import GEN_AI, TRACER_NAME, configure_from_env, span
    from ctxbus.bus._txlog import LogEntry, TxLog, TxLogConfig

__all__ = [
    "AppendExpired",
    "GEN_AI",
    "TRACER_NAME",
    "configure_from_env",
    "span",
    "DEFAULT_REPEAT_WINDOW",
    "RepeatFilter",
    "AuthStore",
    "Credentials",
    "CredentialsError",
    "EntryOutcome",
    "KeyInvalid",
    "NoResponders",
    "NotAuthorized",
    "NotFound",
    "Refused",
    "Role",
    "Signer",
    "Unsigned",
    "Verifier",
    "STOP_SIGNALS",
    "BRIEF_BUCKET",
    "COORDINATORS_BUCKET",
    "coordinator_key",
    "BriefLog",
    "BriefState",
    "Bucket",
    "BucketConfig",
    "BusConfig",
    "BusError",
    "BusUnavailable",
    "CasConflict",
    "LogTruncated",
    "DEFAULT_CONNECT_DEADLINE",
    "DEFAULT_SYNC_INTERVAL",
    "EmbeddedServer",
    "GLOBAL_DLQ",
    "Handler",
    "KvEntry",
    "LEASE_BUCKET",
    "Lease",
    "LeaseConfig",
    "LeaseHeld",
    "Leases",
    "Listener",
    "LogEntry",
    "METRICS_SUBJECT",
    "NO_UVLOOP_ENV",
    "LoopbackCluster",
    "NatsClient",
    "PidLock",
    "ProcessGroup",
    "PRESENCE_BUCKET",
    "PROPOSE_QUEUE",
    "STATUS_SUBJECT",
    "SUBJECT_ROOT",
    "Request",
    "Retry",
    "may_pass",
    "ServerError",
    "StreamMissing",
    "TX_STREAM",
    "TX_SUBJECTS",
    "TlsConfig",
    "TxLog",
    "TxLogConfig",
    "Verb",
    "all_domains",
    "anyio_backend",
    "batch_msg_id",
    "commits_of",
    "read_entry",
    "close_quietly",
    "connect",
    "domain_of",
    "event_loop_name",
    "find_nats_server",
    "free_port",
    "kv_key",
    "gather",
    "listen",
    "live_subject",
    "publish",
    "request",
    "routed",
    "run_async",
    "serve",
    "subject",
    "uses_uvloop",
]

_EXPORTS = {
    "_auth": ("AuthStore", "Credentials", "CredentialsError", "Role"),
    "_brief_log": ("BriefLog", "BriefState", "EntryOutcome", "batch_msg_id", "commits_of", "read_entry"),
    "_cluster": ("LoopbackCluster",),
    "_connection": ("DEFAULT_CONNECT_DEADLINE", "BusConfig", "NatsClient", "TlsConfig", "close_quietly", "connect"),
    "_errors": (
        "AppendExpired",
        "BusError",
        "BusUnavailable",
        "CasConflict",
        "LeaseHeld",
        "LogTruncated",
        "NoResponders",
        "NotAuthorized",
        "NotFound",
        "Refused",
        "ServerError",
        "StreamMissing",
        "Unsigned",
    ),
    "_event_loop": ("NO_UVLOOP_ENV", "STOP_SIGNALS", "anyio_backend", "event_loop_name", "run_async", "uses_uvloop"),
    "_keys": ("KeyInvalid", "Signer", "Verifier"),
    "_kv": ("Bucket", "BucketConfig", "KvEntry"),
    "_leases": ("Lease", "LeaseConfig", "Leases"),
    "_lifecycle": ("ProcessGroup",),
    "_logging": ("DEFAULT_REPEAT_WINDOW", "RepeatFilter"),
    "_pid_lock": ("PidLock",),
    "_retry": ("Retry",),
    "_rpc": ("Handler", "Listener", "Request", "gather", "listen", "publish", "request", "serve"),
    "_server": ("DEFAULT_SYNC_INTERVAL", "EmbeddedServer", "find_nats_server", "free_port"),
    "_streams": ("may_pass",),
    "_subjects": (
        "BRIEF_BUCKET",
        "COORDINATORS_BUCKET",
        "GLOBAL_DLQ",
        "LEASE_BUCKET",
        "METRICS_SUBJECT",
        "PRESENCE_BUCKET",
        "PROPOSE_QUEUE",
        "STATUS_SUBJECT",
        "SUBJECT_ROOT",
        "TX_STREAM",
        "TX_SUBJECTS",
        "Verb",
        "all_domains",
        "coordinator_key",
        "domain_of",
        "kv_key",
        "live_subject",
        "routed",
        "subject",
    ),
    "_tracing": ("GEN_AI", "TRACER_NAME", "configure_from_env", "span"),
    "_txlog": ("LogEntry", "TxLog", "TxLogConfig"),
}
"""The module of this package that defines each name, imported on first use."""
_HOMES = {name: f"{__name__}.{module}" for module, names in _EXPORTS.items() for name in names}


__getattr__, __dir__ = _lazy_names(__name__, _HOMES)
