"""Helpers shared by test modules (fixtures themselves live in conftest files)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any, NamedTuple

import anyio
from anyio.abc import TaskGroup

from ctxbus.bus import BusConfig, NatsClient, connect
from ctxbus.coordinator import Coordinator, CoordinatorConfig
from ctxbus.schemas import Domain


class Serving(NamedTuple):
    """An in-process coordinator, its client, and the task group it runs in."""

    client: NatsClient
    tg: TaskGroup
    coordinator: Coordinator


@asynccontextmanager
async def serving_coordinator(url: str, **config: Any) -> AsyncIterator[Serving]:
    """A client with one in-process coordinator serving on it, the task group it runs in
    (for the test's own background tasks) and the coordinator itself (for its public
    state); all stopped on exit."""
    client = await connect(BusConfig(servers=[url]))
    try:
        async with anyio.create_task_group() as tg:
            coordinator = Coordinator(client, CoordinatorConfig(**config))
            await tg.start(coordinator.run)
            yield Serving(client, tg, coordinator)
            tg.cancel_scope.cancel()
    finally:
        await client.close()


@asynccontextmanager
async def running_coordinator(url: str, **config: Any) -> AsyncIterator[tuple[NatsClient, TaskGroup]]:
    """`serving_coordinator`, for tests that need only the client and the task group."""
    async with serving_coordinator(url, **config) as serving:
        yield serving.client, serving.tg


def fresh_domain(user: str = "u") -> Domain:
    """A domain no other test uses: tests share one server."""
    return Domain.parse(f"{user}/s1/{uuid.uuid4().hex[:8]}")
