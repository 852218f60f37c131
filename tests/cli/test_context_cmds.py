"""`ctxbus replay` and `ctxbus inspect` as a user runs them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from ctxbus.agents.context import LocalContext
from ctxbus.schemas import Domain
from tests.context.conftest import anchors_dir


def _ctxbus(*args: str, state: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CTXBUS_STATE_DIR": str(state), "COLUMNS": "200"}
    return subprocess.run(
        [sys.executable, "-m", "ctxbus.coordinator.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def _transcript(path: Path, turns: int) -> Path:
    lines = [{"role": "user", "content": "Fix the parser. Do NOT commit anything."}]
    for i in range(turns):
        call = f"c{i}"
        lines.append({"role": "assistant", "content": f"look {i}", "tool_name": "bash", "tool_call_id": call})
        lines.append({"role": "tool", "content": f"line {i}\n" * 400, "tool_name": "bash", "tool_call_id": call})
    path.write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    return path


def test_replay_reports_savings(tmp_path: Path) -> None:
    files = [str(_transcript(tmp_path / "s.jsonl", 40))]
    real = anchors_dir() / "transcripts" / "swe-agent" / "gpt4__pydicom__pydicom-1458.jsonl"
    assert real.is_file(), f"anchor transcript {real} not found (set CTXBUS_ANCHORS); it is required, not optional"
    files.append(str(real))
    out = _ctxbus("replay", *files, "--budget", "8000", "--json", state=tmp_path)
    assert out.returncode == 0, out.stderr
    reports = json.loads(out.stdout)
    assert len(reports) == len(files)
    for report in reports:
        assert report["mean_prompt_tokens"] <= 8000
        assert report["mean_prompt_tokens"] < report["mean_history_tokens"]
        assert 0 < report["saving"] < 1
        cache = report["cache"]
        assert 0 < cache["cached_share"] <= 1 and 0 < cache["full_history_cached_share"] <= 1
        assert set(cache["cost_vs_full_history"]) == {"anthropic", "openai"}
        assert cache["price_presets"]["anthropic"] == {"write": 1.25, "read": 0.1}
        assert all(0 < ratio for ratio in cache["cost_vs_full_history"].values())
    assert reports[1]["trims"], "a real session at 8k must trim something"


def test_replay_names_the_bad_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"role": "user", "content": "hi"}\n{"role": "user"\n')
    out = _ctxbus("replay", str(bad), state=tmp_path)
    assert out.returncode == 1
    assert f"{bad}:2: not JSON" in out.stderr
    odd = tmp_path / "odd.jsonl"
    odd.write_text('{"role": "narrator", "content": "hi"}\n')
    out = _ctxbus("replay", str(odd), state=tmp_path)
    assert out.returncode == 1 and f"{odd}:1:" in out.stderr and "narrator" in out.stderr


def test_inspect_shows_the_layers_of_an_agent_store(tmp_path: Path) -> None:
    domain = Domain.parse("alice/s1/t1")
    store = tmp_path / "agents" / "alice" / "s1" / "t1" / "a1.db"
    store.parent.mkdir(parents=True)
    with LocalContext(store, domain) as context:
        context.add("user", "Remember: the API budget is 50k tokens.")
        context.add("assistant", "Understood.")
    out = _ctxbus("inspect", "a1", "--domain", "alice/s1/t1", "--json", state=tmp_path)
    assert out.returncode == 0, out.stderr
    layers = {layer["layer"]: layer for layer in json.loads(out.stdout)}
    assert "pinned" in layers and "rolling" in layers
    assert any("50k tokens" in item["text"] for item in layers["pinned"]["items"])
    missing = _ctxbus("inspect", "nobody", "--domain", "alice/s1/t1", state=tmp_path)
    assert missing.returncode == 2 and "no store of agent 'nobody' at" in missing.stderr
    assert "--store" in missing.stderr


def test_inspect_shows_the_users_share_and_what_of_it_is_archived(tmp_path: Path) -> None:
    """Issue 29: a user sees why their paste is behind a locator and their sentences are not."""
    from ctxbus.agents.context import ContextConfig
    from ctxbus.agents.runtime import save_config
    from tests.context.test_authored import AROUND_LOG, GOAL, LOG, SMALL, WINDOW, _until_authored

    domain = Domain.parse("alice/s1/t1")
    store = tmp_path / "agents" / "alice" / "s1" / "t1" / "a1.db"
    store.parent.mkdir(parents=True)
    config = ContextConfig(window=WINDOW, **SMALL)  # type: ignore[arg-type]
    with LocalContext(store, domain, config=config) as context:
        save_config(context, config)
        context.add("user", GOAL)
        tag = context.add("user", "\n".join([AROUND_LOG[0], *LOG, AROUND_LOG[1]]))
        _until_authored(context, tag)
    out = _ctxbus("inspect", "a1", "--domain", "alice/s1/t1", "--json", state=tmp_path)
    assert out.returncode == 0, out.stderr
    authored = next(layer for layer in json.loads(out.stdout) if layer["layer"] == "authored")
    (item,) = [i for i in authored["items"] if i["tag"] == tag]
    assert item["lines"] == len(LOG) + 2 and item["archived"] >= len(LOG) - 2 and item["folded"] == 0
    assert AROUND_LOG[0] in item["text"] and LOG[10] not in item["text"]
    shown = _ctxbus("inspect", "a1", "--domain", "alice/s1/t1", state=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert "what the user wrote, in their words" in shown.stdout
    assert f"1 with {item['archived']} pasted lines archived" in shown.stdout
