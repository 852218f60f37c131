"""Asking the page's server over HTTP, as a browser's fetch would: urllib in a thread."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Callable
from typing import Any

import anyio

__all__ = ["Json", "get", "until"]

Json = dict[str, Any]


def _get(url: str) -> tuple[int, Json]:
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


async def get(url: str) -> tuple[int, Json]:
    return await anyio.to_thread.run_sync(_get, url)


async def until(probe: Callable[[], Any], what: str, limit: float = 60.0) -> Any:
    """Poll `probe` (async) until it returns something truthy; fail after `limit` seconds."""
    try:
        with anyio.fail_after(limit):
            while True:
                found = await probe()
                if found:
                    return found
                await anyio.sleep(0.1)
    except TimeoutError:
        raise AssertionError(f"gave up waiting for {what}") from None
