"""Helpers shared by test modules (fixtures themselves live in conftest files)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
from anyio.abc import TaskGroup

from bus import BusConfig, NatsClient, connect
from coordinator import Coordinator, CoordinatorConfig
from schemas import Domain


@asynccontextmanager
async def running_coordinator(url: str, **config: Any) -> AsyncIterator[tuple[NatsClient, TaskGroup]]:
    """A client with one in-process coordinator serving on it, and the task group it runs
    in (for the test's own background tasks); both are stopped on exit."""
    client = await connect(BusConfig(servers=[url]))
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(Coordinator(client, CoordinatorConfig(**config)).run)
            yield client, tg
            tg.cancel_scope.cancel()
    finally:
        await client.close()


def fresh_domain(user: str = "u") -> Domain:
    """A domain no other test uses: tests share one server."""
    return Domain.parse(f"{user}/s1/{uuid.uuid4().hex[:8]}")
