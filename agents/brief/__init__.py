"""The agent's side of the shared brief: replica, proposer, presence heartbeat."""

from agents.brief._presence import DEFAULT_HEARTBEAT, PresenceBeacon, read_presence
from agents.brief._proposer import DEFAULT_PROPOSE_DEADLINE, ProposalUnanswered, Proposer
from agents.brief._replica import BriefReplica

__all__ = [
    "BriefReplica",
    "DEFAULT_HEARTBEAT",
    "DEFAULT_PROPOSE_DEADLINE",
    "PresenceBeacon",
    "ProposalUnanswered",
    "Proposer",
    "read_presence",
]
