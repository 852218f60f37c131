"""The coordinator daemon and the `ctxbus` command line."""

from coordinator._config import CoordinatorConfig
from coordinator._dead_letters import GLOBAL_DLQ
from coordinator._service import METRICS_SUBJECT, STATUS_SUBJECT, Coordinator

__all__ = ["Coordinator", "CoordinatorConfig", "GLOBAL_DLQ", "METRICS_SUBJECT", "STATUS_SUBJECT"]
