"""An agent's copy of the shared brief, kept in step with the domain's log.

Every replica applies the same commits in the same order, so replicas at the same
revision hold the same brief, with the same hash. A replica joins from the latest
snapshot, or resumes from a state the agent saved, and only replays what came after.
"""

from __future__ import annotations

import logging
import math

import anyio
from anyio.abc import TaskStatus

from ctxbus.bus import BriefLog, BriefState, NatsClient, TxLogConfig, Verifier
from ctxbus.schemas import Domain, TaskBrief, UsageError, brief_hash, render_brief

__all__ = ["BriefReplica"]

log = logging.getLogger(__name__)


class BriefReplica:
    """Follows one domain's log and holds the brief it describes.

    Run it in a task group with `await tg.start(replica.run)`: it returns once the
    brief has caught up with the log, then keeps following until cancelled.

    :param resume_from: a state saved earlier (e.g. in the agent's store); the replica
        catches up from its sequence instead of loading the snapshot, unless the log no
        longer reaches that far (the domain was closed and purged meanwhile).
    :param verifier: apply only log entries signed by a key it trusts (the tenant's
        coordinators'); any other is skipped, logged and counted (`refused_entries`).
    """

    def __init__(
        self,
        client: NatsClient,
        domain: Domain | str,
        *,
        resume_from: BriefState | None = None,
        brief_log: BriefLog | None = None,
        verifier: Verifier | None = None,
    ) -> None:
        domain = Domain.of(domain)
        if resume_from is not None and resume_from.domain != domain:
            raise UsageError(f"cannot resume {domain} from a state of {resume_from.domain}")
        self.domain = domain
        # No consumers: the agent role may not create them (`TxLogConfig.consumers`).
        self._log = brief_log or BriefLog(client, verifier=verifier, txlog=TxLogConfig(consumers=False))
        self._state = resume_from
        self._changed = anyio.Event()

    def __repr__(self) -> str:
        revision = f"rev={self.revision}" if self.joined else "joining"
        return f"<BriefReplica {self.domain} {revision}>"

    @property
    def joined(self) -> bool:
        """Whether the replica holds a brief yet (resumed from a saved state, or joined
        by `run`): until then `state` and everything read from it raise."""
        return self._state is not None

    @property
    def state(self) -> BriefState:
        """The brief and the log sequence it reflects."""
        if self._state is None:
            raise UsageError(f"the replica of {self.domain} has not joined yet; start run() first")
        return self._state

    @property
    def refused_entries(self) -> int:
        """Log entries skipped because no trusted key signed them."""
        return self._log.refused

    @property
    def brief(self) -> TaskBrief:
        return self.state.brief

    @property
    def revision(self) -> int:
        return self.state.brief.revision

    @property
    def hash(self) -> str:
        """Canonical hash of the brief: equal on every replica at the same revision.

        But for a closed domain: one loaded after its log was purged holds only what
        `TaskBrief.purged` keeps (revision, closure, keys), not the content a replica
        that followed the log to the close still holds.
        """
        return brief_hash(self.state.brief)

    def render(self) -> str:
        """The brief as the text block an agent's pinned context carries."""
        return render_brief(self.state.brief)

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        """Join (or resume), report ready, then apply every new commit until cancelled."""
        if self._state is None:
            self._state = await self._log.load(self.domain)
            log.info("joined %s at revision %d (seq %d)", self.domain, self.revision, self._state.seq)
        else:
            before = self._state.brief.revision
            self._state = await self._log.refresh(self._state)
            log.info("resumed %s: revision %d -> %d", self.domain, before, self.revision)
        self._notify()
        task_status.started()
        await self._log.follow(self._state, self._advance)

    async def wait_for(self, revision: int, *, timeout: float | None = None) -> BriefState:
        """Wait until the replica reaches `revision`; returns the state then.

        :raises TimeoutError: if it does not within `timeout` seconds.
        """
        with anyio.fail_after(timeout if timeout is not None else math.inf):
            while self._state is None or self._state.brief.revision < revision:
                await self._changed.wait()
        return self._state

    def _advance(self, state: BriefState) -> None:
        self._state = state
        self._notify()

    def _notify(self) -> None:
        self._changed.set()
        self._changed = anyio.Event()
