"""The coordinator daemon and the `ctxbus` command line.

The names below are imported on first use: the `ctxbus` command line lives in this
package too, and `ctxbus --version` must not wait for the daemon, NATS and pydantic to
load.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from bus import GLOBAL_DLQ, METRICS_SUBJECT, STATUS_SUBJECT
    from coordinator._committer import CommitterState, DomainCommitter
    from coordinator._config import CoordinatorConfig
    from coordinator._metrics import Metrics, MetricsServer
    from coordinator._presence import CoordinatorView, ServingState, survey
    from coordinator._service import Coordinator

__all__ = [
    "CommitterState",
    "Coordinator",
    "CoordinatorConfig",
    "CoordinatorView",
    "DomainCommitter",
    "Metrics",
    "MetricsServer",
    "ServingState",
    "survey",
    "GLOBAL_DLQ",
    "METRICS_SUBJECT",
    "STATUS_SUBJECT",
]

_HOMES = {
    "CommitterState": "coordinator._committer",
    "DomainCommitter": "coordinator._committer",
    "Coordinator": "coordinator._service",
    "Metrics": "coordinator._metrics",
    "MetricsServer": "coordinator._metrics",
    "CoordinatorView": "coordinator._presence",
    "ServingState": "coordinator._presence",
    "survey": "coordinator._presence",
    "CoordinatorConfig": "coordinator._config",
    "GLOBAL_DLQ": "bus",
    "METRICS_SUBJECT": "bus",
    "STATUS_SUBJECT": "bus",
}


def __getattr__(name: str) -> object:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(_importlib.import_module(home), name)
    globals()[name] = value  # found directly next time
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
