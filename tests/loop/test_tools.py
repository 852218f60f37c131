"""Tools from typed Python functions, and the bash tool's limits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import anyio
import pytest
from pydantic import Field

from ctxbus.agents.loop import BashTool, Toolbox, ToolError


def forecast(city: Annotated[str, Field(description="Where.")], days: int = 3, *, metric: bool = True) -> str:
    """The weather ahead."""
    return f"{city}: sunny for {days} days ({'C' if metric else 'F'})"


async def slow(text: str) -> str:
    """Echo, asynchronously."""
    return text.upper()


def test_a_functions_signature_is_its_schema_and_its_docstring_its_description() -> None:
    tools = Toolbox()
    tools.add(forecast)
    [spec] = tools.to_openai()
    assert spec == {
        "type": "function",
        "function": {
            "name": "forecast",
            "description": "The weather ahead.",
            "parameters": {
                "additionalProperties": False,
                "properties": {
                    "city": {"description": "Where.", "type": "string"},
                    "days": {"default": 3, "type": "integer"},
                    "metric": {"default": True, "type": "boolean"},
                },
                "required": ["city"],
                "type": "object",
            },
        },
    }


async def test_calls_are_checked_against_the_signature_and_a_bad_one_says_what_was_wrong() -> None:
    tools = Toolbox()
    tools.add(forecast)
    tools.add(slow, name="shout")
    assert await tools.call("forecast", json.dumps({"city": "Oslo", "days": 2})) == (
        "Oslo: sunny for 2 days (C)",
        False,
    )
    assert await tools.call("shout", '{"text": "hi"}') == ("HI", False)
    text, failed = await tools.call("forecast", '{"city": 7, "days": "many", "colour": 1}')
    assert failed and text.startswith("error: bad arguments for forecast: field 'city': Input should be a valid string")
    assert "field 'days'" in text and "field 'colour': Extra inputs are not permitted" in text
    assert await tools.call("forecast", "[1]") == (
        "error: the arguments of forecast must be a JSON object, got [1]",
        True,
    )
    assert (await tools.call("forecast", "{"))[0].startswith("error: the arguments of forecast are not valid JSON")
    assert await tools.call("nope", "{}") == (
        "error: there is no tool named 'nope'; the tools are: forecast, shout",
        True,
    )


async def test_a_tool_that_raises_is_a_failed_result() -> None:
    def broken() -> str:
        """Fails."""
        raise RuntimeError("disk on fire")

    tools = Toolbox()
    tools.add(broken)
    assert await tools.call("broken", "{}") == ("error: broken failed: RuntimeError: disk on fire", True)


def test_names_a_provider_refuses_and_taken_names_are_refused() -> None:
    tools = Toolbox()
    tools.add(forecast)
    with pytest.raises(ToolError, match="there is a tool named 'forecast' already"):
        tools.add(forecast)
    with pytest.raises(ToolError, match="must be 1 to 64 of the characters"):
        tools.add(forecast, name="weather.now")


async def test_bash_runs_in_its_workdir_with_a_timeout_and_an_output_cap(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello\n")
    bash = BashTool(tmp_path, timeout=1.0, output_cap=400)
    assert await bash.run("pwd && cat notes.txt") == f"exit code 0\n{tmp_path.resolve()}\nhello\n"
    assert (await bash.run("echo oops >&2; exit 3")) == "exit code 3\noops\n"
    long = await bash.run("seq 1 2000")
    assert long.startswith("exit code 0\n1\n2\n") and long.endswith("1999\n2000\n")
    assert "characters cut: run a narrower command" in long and len(long) < 600
    assert (await bash.run("sleep 30; echo never")).startswith("killed after 1s (timeout)")


async def test_bash_kills_the_whole_process_group_at_the_timeout(tmp_path: Path) -> None:
    bash = BashTool(tmp_path, timeout=1.0)
    await bash.run("(sleep 3; touch escaped) & sleep 30")
    await anyio.sleep(3.5)
    assert not (tmp_path / "escaped").exists()
