"""The coordinator daemon and the `ctxbus` command line."""

from bus import GLOBAL_DLQ, METRICS_SUBJECT, STATUS_SUBJECT
from coordinator._committer import CommitterState, DomainCommitter
from coordinator._config import CoordinatorConfig
from coordinator._service import Coordinator

__all__ = [
    "CommitterState",
    "Coordinator",
    "CoordinatorConfig",
    "DomainCommitter",
    "GLOBAL_DLQ",
    "METRICS_SUBJECT",
    "STATUS_SUBJECT",
]
