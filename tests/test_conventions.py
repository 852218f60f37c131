"""Meta-tests that pin the architecture: public faces, import seams, layering."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "ctxbus"
PACKAGES = ("schemas", "bus", "agents", "coordinator")

# Who may import whom (DESIGN section 2). The CLI is the composition root.
ALLOWED = {
    "schemas": set(),
    "bus": {"schemas"},
    "agents": {"schemas", "bus"},
    "coordinator": {"schemas", "bus"},
}
COMPOSITION_ROOTS = {"coordinator/cli.py", "coordinator/cli"}
BASE = {"_lazy"}
"""Modules at the top of the namespace (`ctxbus._lazy`) that every package may import:
they import nothing of ours."""


def _modules() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py"))


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(_package(alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module == "ctxbus":  # from ctxbus import bus
                found.update(f"ctxbus.{alias.name}" for alias in node.names)
            else:
                found.add(_package(node.module))
    return found


def _package(module: str) -> str:
    """The first part of `module`, or for one of ours (`ctxbus.bus._kv`) its package
    (`ctxbus.bus`): the OpenAI Agents SDK's top-level `agents` is not `ctxbus.agents`."""
    parts = module.split(".")
    return f"ctxbus.{parts[1]}" if parts[0] == "ctxbus" and len(parts) > 1 else parts[0]


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_layering(path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    package = rel.split("/")[0]
    ours = {name.removeprefix("ctxbus.") for name in _imports(path) if name.startswith("ctxbus.")} - {package}
    if any(rel == root or rel.startswith(root + "/") for root in COMPOSITION_ROOTS):
        return
    assert ours <= ALLOWED[package] | BASE, f"{rel} imports {sorted(ours - ALLOWED[package] - BASE)}"


@pytest.mark.parametrize("name", sorted(BASE))
def test_the_base_imports_nothing_of_ours(name: str) -> None:
    path = ROOT / f"{name}.py"
    assert not {n for n in _imports(path) if n.startswith("ctxbus")}, f"ctxbus/{name}.py imports ctxbus"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_only_bus_touches_nats(path: Path) -> None:
    rel = path.relative_to(ROOT).as_posix()
    if rel.startswith("bus/"):
        return
    assert "nats" not in _imports(path), f"{rel} imports nats; go through bus instead"


@pytest.mark.parametrize(
    "package",
    [
        "ctxbus.schemas",
        "ctxbus.bus",
        "ctxbus.agents.context",
        "ctxbus.agents.nudges",
        "ctxbus.agents.brief",
        "ctxbus.agents.runtime",
        "ctxbus.agents.mcp",
        "ctxbus.agents.swarm",
        "ctxbus.agents.adapters.langchain",
        "ctxbus.agents.adapters.autogen",
        "ctxbus.agents.adapters.openai_agents",
        "ctxbus.coordinator",
    ],
)
def test_public_names_exist_and_are_listed(package: str) -> None:
    module = importlib.import_module(package)
    exported = getattr(module, "__all__", None)
    assert exported is not None, f"{package} has no __all__"
    assert len(exported) == len(set(exported)), f"{package}.__all__ repeats a name"
    for name in exported:
        assert hasattr(module, name), f"{package}.__all__ lists {name!r}, which does not exist"
    public = {n for n in vars(module) if not n.startswith("_") and not isinstance(getattr(module, n), type(ast))}
    unlisted = public - set(exported)
    assert not unlisted, f"{package} exposes {sorted(unlisted)} without listing them in __all__"


def test_every_error_derives_from_the_root() -> None:
    from ctxbus import bus, schemas

    for module in (schemas, bus):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type) and issubclass(obj, Exception):
                assert issubclass(obj, schemas.CtxbusError), f"{module.__name__}.{name}"
