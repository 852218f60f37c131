"""Dead letters: messages a coordinator could not read, kept where an operator can look."""

from __future__ import annotations

import logging

from ctxbus.bus import GLOBAL_DLQ, BusError, NatsClient, Request, Verb, publish, subject
from ctxbus.coordinator._metrics import Metrics
from ctxbus.schemas import DeadLetter, Domain, PayloadTooLarge

__all__ = ["DeadLetters"]

log = logging.getLogger(__name__)


class DeadLetters:
    """Publishes a report (`schemas.DeadLetter`) for each rejected message to its domain's
    `dlq` subject, or to `bus.GLOBAL_DLQ` when its subject names no valid domain."""

    def __init__(self, client: NatsClient, *, sender: str, metrics: Metrics) -> None:
        self._client = client
        self._sender = sender
        self._metrics = metrics

    async def send(self, request: Request, domain: Domain | None, reason: str, detail: str) -> None:
        """Count, log and publish one dead letter; never raises."""
        self._metrics.dead_lettered(reason)
        letter = DeadLetter.of(reason=reason, detail=detail, subject=request.subject, payload=request.data)
        log.warning("dead letter on %s: %s: %s", request.subject, reason, letter.detail)
        try:
            if domain is None:
                await publish(self._client, GLOBAL_DLQ, letter.encode())
                return
            envelope = letter.envelope(domain=domain, sender=self._sender)
            await publish(self._client, subject(domain, Verb.DLQ), envelope.encode())
        except (BusError, PayloadTooLarge) as exc:
            log.warning("could not publish dead letter for %s: %s", request.subject, exc)
