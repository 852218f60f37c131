"""The one map from nats-py's errors to ours: complete, and used where bus calls nats."""

from __future__ import annotations

import ast
import inspect
from pathlib import Path

import nats.errors
import nats.js.errors
import pytest

from ctxbus.bus import BusError, BusUnavailable, NoResponders, NotAuthorized, NotFound, Refused
from ctxbus.bus._translate import MAPPED, translate, translating

ROOT = Path(__file__).resolve().parents[2]


def _nats_errors() -> list[type[BaseException]]:
    found = []
    for module in (nats.errors, nats.js.errors):
        for _, kind in inspect.getmembers(module, inspect.isclass):
            if issubclass(kind, BaseException) and kind.__module__ == module.__name__:
                found.append(kind)
    return found


@pytest.mark.parametrize("kind", _nats_errors(), ids=lambda k: f"{k.__module__}.{k.__name__}")
def test_every_nats_error_is_mapped_by_name(kind: type[BaseException]) -> None:
    """A nats-py upgrade that adds an error fails here until someone decides what it is."""
    assert kind in MAPPED, f"{kind.__module__}.{kind.__name__} is not in bus._translate.MAPPED"


@pytest.mark.parametrize(
    ("error", "ours"),
    [
        (nats.js.errors.NotFoundError(code=404, description="no message found"), NotFound),
        (nats.js.errors.BadRequestError(code=400, err_code=10071, description="wrong last sequence: 7"), Refused),
        (nats.js.errors.ServerError(code=500, description="recovering"), BusUnavailable),
        (nats.errors.NoRespondersError(), NoResponders),
        (nats.js.errors.NoStreamResponseError(), NoResponders),
        (nats.errors.TimeoutError(), BusUnavailable),
        (nats.errors.AuthorizationError(), NotAuthorized),
        (nats.errors.ConnectionClosedError(), BusError),
    ],
)
def test_an_error_becomes_the_most_specific_of_ours(error: BaseException, ours: type[BusError]) -> None:
    translated = translate("cannot read x", error)
    assert type(translated) is ours
    assert str(translated).startswith("cannot read x: ")


def test_a_refusal_keeps_the_servers_codes() -> None:
    refused = translate(
        "append", nats.js.errors.BadRequestError(code=400, err_code=10071, description="wrong last sequence: 7")
    )
    assert isinstance(refused, Refused)
    assert (refused.code, refused.err_code, refused.description) == (400, 10071, "wrong last sequence: 7")


def test_a_subclass_nats_py_adds_later_takes_its_nearest_base() -> None:
    class Newer(nats.js.errors.NotFoundError):
        pass

    assert type(translate("x", Newer(code=404))) is NotFound


def test_translating_chains_the_cause() -> None:
    with pytest.raises(BusUnavailable) as caught, translating("cannot ask"):
        raise nats.errors.TimeoutError()
    assert isinstance(caught.value.__cause__, nats.errors.TimeoutError)


def _catches_nats(path: Path) -> list[int]:
    lines = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ExceptHandler) and node.type is not None and "nats." in ast.unparse(node.type):
            lines.append(node.lineno)
    return lines


@pytest.mark.parametrize("path", sorted((ROOT / "ctxbus" / "bus").glob("*.py")), ids=lambda p: p.name)
def test_bus_catches_nats_errors_only_through_the_map(path: Path) -> None:
    """Only the map, and the connection seam (which must also catch the OS's errors and
    word a refused connection), name nats-py's errors in an `except`."""
    if path.name in ("_translate.py", "_connection.py"):
        return
    assert _catches_nats(path) == [], f"{path.name} catches nats errors itself: use bus._translate.translating"
