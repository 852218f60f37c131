"""The coordinator daemon and the `ctxbus` command line.

The names below are imported on first use: the `ctxbus` command line lives in this
package too, and `ctxbus --version` must not wait for the daemon, NATS and pydantic to
load.
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    from ctxbus.bus import GLOBAL_DLQ, METRICS_SUBJECT, STATUS_SUBJECT
    from ctxbus.coordinator._committer import CommitterState, DomainCommitter
    from ctxbus.coordinator._config import CoordinatorConfig
    from ctxbus.coordinator._metrics import Metrics, MetricsServer
    from ctxbus.coordinator._presence import CoordinatorView, ServingState, survey
    from ctxbus.coordinator._service import Coordinator

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
    "CommitterState": "ctxbus.coordinator._committer",
    "DomainCommitter": "ctxbus.coordinator._committer",
    "Coordinator": "ctxbus.coordinator._service",
    "Metrics": "ctxbus.coordinator._metrics",
    "MetricsServer": "ctxbus.coordinator._metrics",
    "CoordinatorView": "ctxbus.coordinator._presence",
    "ServingState": "ctxbus.coordinator._presence",
    "survey": "ctxbus.coordinator._presence",
    "CoordinatorConfig": "ctxbus.coordinator._config",
    "GLOBAL_DLQ": "ctxbus.bus",
    "METRICS_SUBJECT": "ctxbus.bus",
    "STATUS_SUBJECT": "ctxbus.bus",
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
