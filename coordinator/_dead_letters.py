"""Dead letters: messages a coordinator could not read, kept where an operator can look."""

from __future__ import annotations

import logging
from typing import Final

import msgpack

from bus import BusError, NatsClient, Request, Verb, publish, subject
from coordinator._metrics import Metrics
from schemas import Domain, Envelope, MessageType, PayloadTooLarge

__all__ = ["DeadLetters", "GLOBAL_DLQ"]

log = logging.getLogger(__name__)

GLOBAL_DLQ: Final = "ctxbus.dlq"
"""Where messages go whose subject names no valid domain (a bare msgpack map, since an
envelope needs a domain)."""

_KEPT_BYTES: Final = 4096
"""How much of the offending payload a dead letter quotes."""


class DeadLetters:
    """Publishes a report for each rejected message to its domain's `dlq` subject."""

    def __init__(self, client: NatsClient, *, sender: str, metrics: Metrics) -> None:
        self._client = client
        self._sender = sender
        self._metrics = metrics

    async def send(self, request: Request, domain: Domain | None, reason: str, detail: str) -> None:
        """Count, log and publish one dead letter; never raises."""
        self._metrics.dead_lettered(reason)
        log.warning("dead letter on %s: %s: %s", request.subject, reason, detail)
        body = {
            "reason": reason,
            "detail": detail,
            "subject": request.subject,
            "size": len(request.data),
            "payload_head": request.data[:_KEPT_BYTES],
        }
        try:
            if domain is None:
                await publish(self._client, GLOBAL_DLQ, msgpack.packb(body, use_bin_type=True))
                return
            envelope = Envelope(type=MessageType.DEAD_LETTER, domain=domain, sender=self._sender, body=body)
            await publish(self._client, subject(domain, Verb.DLQ), envelope.encode())
        except (BusError, PayloadTooLarge) as exc:
            log.warning("could not publish dead letter for %s: %s", request.subject, exc)
