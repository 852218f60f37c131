"""The `ctxbus` command line: the composition root that wires the packages for users.

Environment variables and flags are read here and nowhere else; everything below
receives typed settings objects. Nothing imports this package.
"""

from ctxbus.coordinator.cli._app import app, main

__all__ = ["app", "main"]
