"""The event loop ctxbus processes run on: uvloop where installed, unless turned off."""

import subprocess
import sys
from pathlib import Path

import pytest

from ctxbus.bus import NO_UVLOOP_ENV, anyio_backend, event_loop_name, run_async, uses_uvloop

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="uvloop is not a dependency on Windows")


async def _loop_name() -> str:
    return event_loop_name()


def test_runs_on_uvloop_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(NO_UVLOOP_ENV, raising=False)
    assert uses_uvloop()
    assert anyio_backend() == ("asyncio", {"use_uvloop": True})
    assert run_async(_loop_name) == "uvloop"


@pytest.mark.parametrize("value", ["1", "yes"])
def test_the_standard_loop_when_turned_off(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    monkeypatch.setenv(NO_UVLOOP_ENV, value)
    assert not uses_uvloop()
    assert run_async(_loop_name) == "asyncio"


def test_zero_does_not_turn_it_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(NO_UVLOOP_ENV, "0")
    assert run_async(_loop_name) == "uvloop"


async def test_the_suite_runs_on_the_loop_ctxbus_picks() -> None:
    assert event_loop_name() == ("uvloop" if uses_uvloop() else "asyncio")


_CALLS = """
from ctxbus.bus import run_async


async def job(count: int, name: str) -> bool:
    return count > len(name)


fine: bool = run_async(job, 1, "x")
run_async(job, "1", "x")
run_async(job, 1)
wrong: str = run_async(job, 1, "x")
"""


def test_a_type_checker_matches_the_arguments_to_the_function(tmp_path: Path) -> None:
    """`run_async` once took `*args: Any`, so mypy checked none of the CLI's calls."""
    pytest.importorskip("mypy")
    calls = tmp_path / "calls.py"
    calls.write_text(_CALLS)
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--cache-dir", str(tmp_path / "cache"), str(calls)],
        cwd=Path(__file__).resolve().parents[2],  # the project's mypy settings and packages
        capture_output=True,
        text=True,
        timeout=120,
    )
    flagged = {int(line.split(":")[1]) for line in checked.stdout.splitlines() if ": error:" in line}
    assert flagged == {10, 11, 12}, checked.stdout + checked.stderr
