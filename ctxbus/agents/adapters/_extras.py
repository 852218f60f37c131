"""The error for an adapter whose framework is not installed: which extra brings it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

__all__ = ["needs_extra"]


@contextlib.contextmanager
def needs_extra(extra: str, *packages: str) -> Iterator[None]:
    """Run the body (the adapter's imports); a missing one of `packages` (the framework's
    top-level packages) is raised again naming `pip install 'ctxbus[extra]'`. Anything
    else missing is raised as it is: that is not the extra's to bring."""
    try:
        yield
    except ModuleNotFoundError as exc:
        if (exc.name or "").split(".")[0] not in packages:
            raise
        raise ModuleNotFoundError(
            f"{exc} (this adapter needs its framework: pip install 'ctxbus[{extra}]')", name=exc.name
        ) from exc
