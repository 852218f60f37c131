"""Core NATS request/reply and publish, behind our own types and errors.

Proposals, status queries and dead letters are plain core-NATS messages: they need no
storage, only an answer (or nothing). Handlers see a `Request`, never a nats-py `Msg`.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import anyio
from anyio.abc import TaskStatus
from nats.aio.client import Client
from nats.aio.msg import Msg

from ctxbus.bus._errors import BusError, BusUnavailable, NoResponders, Unsigned
from ctxbus.bus._keys import Signer, Verifier, sealed_by
from ctxbus.bus._translate import translating

__all__ = ["Request", "Handler", "Listener", "listen", "serve", "request", "gather", "publish"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Request:
    """An incoming message: where it came, what it says, where an answer goes."""

    subject: str
    data: bytes
    reply: str | None


Handler = Callable[[Request], Awaitable[bytes | None]]
"""Handles one request; returns the reply payload, or None to send no reply."""

Listener = Callable[[Request], Awaitable[None]]
"""Takes one message in turn, inside the subscription: it must not wait on anything slow."""


async def listen(
    client: Client,
    subject: str,
    listener: Listener,
    *,
    queue: str | None = None,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Call `listener` for every message on `subject`, one at a time, until cancelled.

    The listener runs inside the subscription's own task, with no task per message:
    the cheapest way to take messages in, for a listener that hands anything slow to
    tasks of its own. One that raises is logged, and listening goes on. With `queue`,
    each message goes to one member of the queue group.
    """

    async def on_msg(msg: Msg) -> None:
        try:
            await listener(Request(msg.subject, msg.data, msg.reply or None))
        except Exception:  # one bad message must not stop the listener
            log.exception("listener for %s failed", msg.subject)

    # A callback, not `sub.messages`: nats-py's iterator costs a task per message.
    with translating(f"cannot listen on {subject}"):
        sub = await client.subscribe(subject, queue=queue or "", cb=on_msg, pending_msgs_limit=65536)
    try:
        with translating(f"cannot listen on {subject}"):
            await client.flush()  # the server knows the subscription before we report ready
        task_status.started()
        await anyio.sleep_forever()
    finally:
        with anyio.CancelScope(shield=True), contextlib.suppress(BusError), translating("cannot unsubscribe"):
            await sub.unsubscribe()  # the connection may be closed already


async def serve(
    client: Client,
    subject: str,
    handler: Handler,
    *,
    queue: str | None = None,
    max_in_flight: int = 256,
    task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Run `handler` for every message on `subject` until cancelled.

    With `queue`, each message goes to one member of the queue group. Up to
    `max_in_flight` handlers run at once; a handler that raises is logged and its
    request gets no reply (the requester times out and may retry), but serving goes on.
    """
    limiter = anyio.CapacityLimiter(max_in_flight)

    async def handle(request: Request) -> None:
        # `acquire()` always yields to the event loop, even when the limiter is free, and
        # every trip through the loop costs an epoll call: take it at once when we can.
        try:
            limiter.acquire_nowait()
        except anyio.WouldBlock:
            await limiter.acquire()
        try:
            answer = await handler(request)
            if answer is not None and request.reply:
                with translating(f"cannot answer on {request.reply}"):
                    await client.publish(request.reply, answer)
        except Exception:  # one bad request must not stop the service
            log.exception("handler for %s failed", request.subject)
        finally:
            limiter.release()

    async with anyio.create_task_group() as tg:

        async def dispatch(request: Request) -> None:
            tg.start_soon(handle, request)

        await listen(client, subject, dispatch, queue=queue, task_status=task_status)


async def request(
    client: Client, subject: str, data: bytes, *, timeout: float, verifier: Verifier | None = None
) -> bytes:
    """Send `data` and wait for one reply.

    :param verifier: the reply must be signed by a key it trusts (`publish(signer=)`).
    :raises BusUnavailable: if nobody answered within `timeout` (or nobody listens).
    :raises Unsigned: if `verifier` is given and the reply is not signed by a trusted key.
    :raises BusError: if the request cannot be sent at all (client closed, payload too big).
    """
    try:
        with translating(f"request on {subject} failed"):
            msg = await client.request(subject, data, timeout=timeout)
    except NoResponders as exc:
        raise NoResponders(f"nobody is serving {subject}") from exc
    except BusUnavailable as exc:
        raise BusUnavailable(f"no reply on {subject} within {timeout}s ({exc})") from exc
    if verifier is not None and not sealed_by(verifier, msg.data, msg.headers):
        raise Unsigned(f"the reply on {subject} is not signed by a trusted key")
    return msg.data


async def gather(
    client: Client, subject: str, data: bytes, *, wait: float, enough: Callable[[list[bytes]], bool] | None = None
) -> list[bytes]:
    """Send `data` to every listener of `subject` and return the replies that arrive
    within `wait` seconds (none if nobody listens), in order of arrival; as soon as
    `enough(replies)` says so, if given (every listener known to be there answered).

    For questions every member of a group answers, such as a status request.

    :raises BusUnavailable: if the request cannot be sent now.
    :raises BusError: if it cannot be sent at all (client closed, payload too big).
    """
    inbox = client.new_inbox()
    replies: list[bytes] = []
    with translating(f"request on {subject} failed"):
        sub = await client.subscribe(inbox)
    try:
        with translating(f"request on {subject} failed"):
            await client.publish(subject, data, reply=inbox)
        with anyio.move_on_after(wait):
            async for msg in sub.messages:
                if msg.headers and msg.headers.get("Status") == "503":
                    continue  # "no responders": nobody listens
                replies.append(msg.data)
                if enough is not None and enough(replies):
                    break
    finally:
        with anyio.CancelScope(shield=True):
            with contextlib.suppress(BusError), translating("cannot unsubscribe"):
                await sub.unsubscribe()
    return replies


async def publish(client: Client, subject: str, data: bytes, *, signer: Signer | None = None) -> None:
    """Fire-and-forget publish; with `signer`, signed (a `request(verifier=)` checks it).

    :raises BusError: if the client cannot take the message (closed, payload too big).
    """
    with translating(f"publish on {subject} failed"):
        await client.publish(subject, data, headers=None if signer is None else signer.seal(data))
