"""`ctxbus web` in a real browser: the system's Chromium, driven by Selenium, watches a
`ctxbus swarm demo` run. The agents appear, the U/T chart gains points as the run goes,
the rejection shows in the brief's timeline with its reason, and a click on a revision
shows that revision's brief. A screenshot of each view is saved: under
`$CTXBUS_WEB_SCREENSHOTS` if set, else the test's tmp dir.

Chromium and chromedriver come from Debian (`apt-get install chromium chromium-driver`,
which `.ci/run` does): without them this test fails, it does not skip.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium import webdriver
from selenium.common.exceptions import StaleElementReferenceException
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.remote.webdriver import WebDriver

from ctxbus.agents.swarm import GOAL, REJECTED_OPTION, agent_name

REJECTION_REASON_WORDS = "will not run Redis in production"
LIMIT = 120.0
"""Seconds to wait for any one thing to show: generous, to fail a hang, not a slow machine."""


def _binary(*names: str) -> str:
    for name in names:
        found = shutil.which(name)
        if found:
            return found
    pytest.fail(f"none of {names} is installed: `apt-get install -y chromium chromium-driver` (.ci/run does)")


def _wait(what: str, probe: Callable[[], Any], limit: float = LIMIT) -> Any:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        try:
            found = probe()
        except StaleElementReferenceException:  # the page redrew it meanwhile: it updates live
            found = None
        if found:
            return found
        time.sleep(0.2)
    raise AssertionError(f"gave up waiting for {what}")


def _line(path: Path, pattern: str, process: subprocess.Popen[bytes]) -> re.Match[str]:
    def probe() -> re.Match[str] | None:
        if process.poll() is not None:
            raise AssertionError(f"{process.args} exited with {process.returncode}:\n{path.read_text()}")
        return re.search(pattern, path.read_text()) if path.exists() else None

    found: re.Match[str] = _wait(f"{pattern!r} in {path}", probe)
    return found


def _stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGINT)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


@pytest.fixture
def browser() -> Iterator[WebDriver]:
    options = Options()
    options.binary_location = _binary("chromium", "chromium-browser")
    for argument in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1500,1000"):
        options.add_argument(argument)
    driver = webdriver.Chrome(options=options, service=Service(_binary("chromedriver")))
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def shots(tmp_path: Path) -> Path:
    place = Path(os.environ.get("CTXBUS_WEB_SCREENSHOTS") or tmp_path / "screenshots")
    place.mkdir(parents=True, exist_ok=True)
    return place


def test_the_page_follows_a_swarm_demo(browser: WebDriver, shots: Path, tmp_path: Path) -> None:
    ctxbus = [sys.executable, "-m", "ctxbus.coordinator.cli"]
    run = tmp_path / "run"
    demo_out = tmp_path / "demo.out"
    env = {**os.environ, "COLUMNS": "200"}
    with demo_out.open("wb") as out:
        demo = subprocess.Popen(
            [*ctxbus, "swarm", "demo", "--agents", "2", "--steps", "60", "--step-delay", "0.3", "--data-dir", str(run)],
            stdout=out, stderr=subprocess.STDOUT, env=env,
        )  # fmt: skip
    web: subprocess.Popen[bytes] | None = None
    try:
        started = _line(demo_out, r"NATS at (nats://\S+?), data in .*task (\S+/\S+/\S+)", demo)
        url, domain = started.group(1), started.group(2)
        web_out = tmp_path / "web.out"
        with web_out.open("wb") as out:
            web = subprocess.Popen(
                [*ctxbus, "web", "--nats", url, "--port", "0", "--store-dir", str(run / "agents"), "--interval", "0.5"],
                stdout=out, stderr=subprocess.STDOUT, env=env,
            )  # fmt: skip
        base = _line(web_out, r"serving (http://127\.0\.0\.1:\d+)", web).group(1)

        # Swarm: both agents, with their bands, under the demo's domain.
        browser.get(f"{base}/#swarm")
        names = {agent_name(0), agent_name(1)}

        def agents_shown() -> bool:
            rows = browser.find_elements(By.CSS_SELECTOR, f'.domain[data-domain="{domain}"] tr.agent-row')
            return {r.get_attribute("data-agent") for r in rows} == names

        _wait("both agents in the swarm view", agents_shown)
        _wait("a serving coordinator", lambda: "serving" in browser.find_element(By.ID, "coordinators").text)
        browser.save_screenshot(str(shots / "web-swarm.png"))

        # Agent: the U/T chart gains points while the run goes on.
        browser.get(f"{base}/#agent:{domain}:{agent_name(0)}")

        def points() -> int:
            return int(browser.find_element(By.ID, "chart-ut").get_attribute("data-points") or 0)

        first = _wait("points on the U/T chart", lambda: points() >= 2 and points())
        _wait("more points on the U/T chart as the run goes", lambda: points() > first)
        _wait("the layers of the agent's store", lambda: browser.find_elements(By.CSS_SELECTOR, ".layer"))
        _wait("a tail that grew", lambda: int(points()) >= 4)
        # Reminders come as the tail grows: Channel 1 (and 2) events, read from the store.
        _wait(
            "a Channel event marked on the U/T chart",
            lambda: int(browser.find_element(By.ID, "chart-ut").get_attribute("data-events") or 0) >= 1,
        )
        browser.save_screenshot(str(shots / "web-agent.png"))

        # Brief: the rejection with its reason; a click on a revision shows the brief then.
        browser.get(f"{base}/#brief:{domain}")

        def rejection() -> int | None:
            for li in browser.find_elements(By.CSS_SELECTOR, "#brief-timeline li.rejection"):
                if REJECTION_REASON_WORDS in li.text and REJECTED_OPTION in li.text:
                    return int(li.get_attribute("data-revision") or 0)
            return None

        def click(revision: int) -> None:  # found and clicked in one step: the list is redrawn live
            script = "document.querySelector('#brief-timeline li[data-revision=\"' + arguments[0] + '\"]').click()"
            browser.execute_script(script, str(revision))

        revision = _wait("the rejection and its reason in the timeline", rejection)
        assert revision > 1
        click(revision)
        shown = _wait(
            "the brief at the rejection's revision",
            lambda: (
                browser.find_element(By.ID, "brief-at").get_attribute("data-revision") == str(revision)
                and browser.find_element(By.ID, "brief-at").text
            ),
        )
        assert REJECTED_OPTION in shown and GOAL in shown
        click(revision - 1)
        shown = _wait(
            "the brief one revision earlier",
            lambda: (
                browser.find_element(By.ID, "brief-at").get_attribute("data-revision") == str(revision - 1)
                and browser.find_element(By.ID, "brief-at").text
            ),
        )
        assert REJECTED_OPTION not in shown, "the revision before the rejection already shows it"
        click(revision)
        _wait(
            "the rejection's revision, again",
            lambda: browser.find_element(By.ID, "brief-at").get_attribute("data-revision") == str(revision),
        )
        browser.save_screenshot(str(shots / "web-brief.png"))

        # Health: coordinators, rejection codes (the refused re-adoption comes mid-run), latency.
        browser.get(f"{base}/#health")
        _wait("commit latency", lambda: "no metrics yet" not in browser.find_element(By.ID, "health-latency").text)
        _wait(
            "the refused re-adoption among the rejection codes",
            lambda: "rejected_option" in browser.find_element(By.ID, "health-rejections").text,
        )
        browser.save_screenshot(str(shots / "web-health.png"))
        severe = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        assert not severe, severe
    finally:
        if web is not None:
            _stop(web)
        _stop(demo)
