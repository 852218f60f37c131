"""`ctxbus.agents.nudges.__all__` is the public face: complete, importable and free of drift."""

from __future__ import annotations

import inspect

import ctxbus.agents.nudges as nudges


def test_every_exported_name_exists() -> None:
    assert len(set(nudges.__all__)) == len(nudges.__all__)
    missing = [name for name in nudges.__all__ if not hasattr(nudges, name)]
    assert missing == []


def test_every_public_name_is_exported() -> None:
    public = {
        name
        for name, value in vars(nudges).items()
        if not name.startswith("_") and not inspect.ismodule(value) and name != "annotations"
    }
    assert public == set(nudges.__all__)


def test_exported_objects_come_from_private_modules() -> None:
    for name in nudges.__all__:
        module = getattr(getattr(nudges, name), "__module__", None)
        if module is not None and module.startswith("agents"):
            assert module.startswith(("ctxbus.agents.nudges._", "ctxbus.agents.context._")), name
