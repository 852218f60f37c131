"""Package faces whose names load on first use (PEP 562's module `__getattr__`).

`ctxbus.bus`, `ctxbus.agents.runtime` and `ctxbus.coordinator` list their names as
usual (`__all__`, and the imports under `TYPE_CHECKING` for type checkers) and import
each from its module only when it is first asked for: a process that needs `PidLock`
or `save_config` alone (a Claude Code hook) does not load NATS, the keys and the log,
and `ctxbus --version` does not load the daemon.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping

__all__ = ["lazy_names"]


def lazy_names(package: str, homes: Mapping[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The `__getattr__` and `__dir__` of `package`, for the names `homes` maps to the
    module that defines each: imported on first use, then kept in the package."""
    face = sys.modules[package]

    def getattr_(name: str) -> object:
        home = homes.get(name)
        if home is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(home), name)
        setattr(face, name, value)  # found directly next time
        return value

    def dir_() -> list[str]:
        return sorted({*vars(face), *homes})

    return getattr_, dir_
