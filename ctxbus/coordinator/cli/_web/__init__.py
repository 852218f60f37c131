"""`ctxbus web`: a live page of the swarm, each agent's context and the brief's history.

Part of the CLI (the composition root): it reads agents' stores with the agent side's
`inspect_store`, and the coordinators with `coordinator.survey`.
"""

from ctxbus.coordinator.cli._web._app import THRESHOLDS, create_app, is_loopback, serving_web
from ctxbus.coordinator.cli._web._brief import BriefHistory, RevisionUnknown
from ctxbus.coordinator.cli._web._store import StoreView, read_store
from ctxbus.coordinator.cli._web._watch import BANDS, Watcher

__all__ = [
    "BANDS",
    "THRESHOLDS",
    "BriefHistory",
    "RevisionUnknown",
    "StoreView",
    "Watcher",
    "create_app",
    "is_loopback",
    "read_store",
    "serving_web",
]
