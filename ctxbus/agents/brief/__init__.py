"""The agent's side of the shared brief: replica, proposer, presence heartbeat."""

from ctxbus.agents.brief._presence import DEFAULT_HEARTBEAT, PresenceBeacon, read_presence
from ctxbus.agents.brief._proposer import DEFAULT_PROPOSE_DEADLINE, ProposalUnanswered, Proposer
from ctxbus.agents.brief._replica import BriefReplica

__all__ = [
    "BriefReplica",
    "DEFAULT_HEARTBEAT",
    "DEFAULT_PROPOSE_DEADLINE",
    "PresenceBeacon",
    "ProposalUnanswered",
    "Proposer",
    "read_presence",
]
