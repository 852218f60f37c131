"""The pytest plugins as a user's project meets them: `tests/plugin_project` is such a
project, with its own settings and no fixture imported, run in a pytest of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ElementTree
from pathlib import Path

import pytest

PROJECT = Path(__file__).resolve().parent / "plugin_project"


@pytest.mark.timeout(600)
def test_a_users_project_gets_every_fixture_from_the_installed_plugins(tmp_path: Path) -> None:
    report = tmp_path / "report.xml"
    env = {name: value for name, value in os.environ.items() if not name.startswith("PYTEST_")}
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "no:cacheprovider",
            f"--basetemp={tmp_path / 'tmp'}",
            f"--junitxml={report}",
        ],
        cwd=PROJECT,
        env={**env, "TMPDIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=540,
    )
    assert ran.returncode == 0, ran.stdout + ran.stderr
    cases = ElementTree.parse(report).getroot().iter("testcase")
    passed = {case.get("name", "").removesuffix("[asyncio]") for case in cases if not list(case)}
    assert passed == {
        "test_a_proposal_is_committed_by_the_session_coordinator",
        "test_a_killed_coordinator_leaves_the_work_to_another",
        "test_a_fixture_client_sends_its_next_request_after_a_restart",
        "test_a_plain_nats_client_with_the_documented_settings_too",
        "test_the_coordinator_serves_on_after_its_server_restarts",
        "test_a_sync_test_kills_and_starts_a_server",
        "test_an_r3_write_goes_through_once_a_new_leader_is_elected",
    }, ran.stdout
