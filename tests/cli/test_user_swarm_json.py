"""`swarm demo --json` says whether its data dir was kept, as the human report does."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.cli._procs import Command

QUICK = ("--agents", "2", "--steps", "40", "--step-delay", "0")
"""The smallest demo: a few seconds."""


def _demo(*args: str, tmp_path: Path) -> tuple[str, str]:
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "TMPDIR": str(tmp_path), "COLUMNS": "400"}
    with Command("swarm", "demo", *QUICK, *args, env=env) as demo:
        out, err = demo.finish()
    assert demo.proc.returncode == 0, f"stdout:\n{out}\nstderr:\n{err}"
    return out, err


@pytest.mark.timeout(120)
def test_a_clean_run_in_a_temp_dir_reports_it_removed_and_a_given_dir_kept(tmp_path: Path) -> None:
    removed = json.loads(_demo("--json", tmp_path=tmp_path)[0])
    assert removed["ok"] is True and removed["unreported"] == []
    assert removed["data_kept"] is False and not Path(removed["data_dir"]).exists()

    out, _ = _demo(tmp_path=tmp_path)
    assert "data kept in" not in out, "the human report does not name a removed dir either"

    given = tmp_path / "run"
    kept = json.loads(_demo("--json", "--data-dir", str(given), tmp_path=tmp_path)[0])
    assert kept["data_kept"] is True and kept["data_dir"] == str(given)
    assert (given / "agents").is_dir()
