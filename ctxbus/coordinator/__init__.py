"""The coordinator daemon and the `ctxbus` command line.

The names below are imported on first use: the `ctxbus` command line lives in this
package too, and `ctxbus --version` must not wait for the daemon, NATS and pydantic to
load.
"""

import typing as _typing

from ctxbus._lazy import lazy_names as _lazy_names

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


__getattr__, __dir__ = _lazy_names(__name__, _HOMES)
