"""`ctxbus web` over HTTP: every endpoint, on a real NATS server with a real coordinator
and a real agent; bad parameters get a clear JSON error and the server keeps serving."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from typer.testing import CliRunner

from ctxbus.agents.context import ContextConfig
from ctxbus.agents.runtime import Agent, AgentConfig
from ctxbus.bus import (
    PRESENCE_BUCKET,
    Bucket,
    BucketConfig,
    BusConfig,
    EmbeddedServer,
    Verb,
    close_quietly,
    connect,
    kv_key,
    publish,
    subject,
)
from ctxbus.coordinator.cli import app
from ctxbus.coordinator.cli._web import read_store, serving_web
from ctxbus.coordinator.testing import CoordinatorFactory
from ctxbus.schemas import AddDecision, Committed, Domain, Presence, Reject, Rejection, SetGoal
from tests._support import fresh_domain, serving_coordinator
from tests.web._http import Json, get, until


@asynccontextmanager
async def web(url: str, store_dir: Path, only: Domain | None = None) -> AsyncIterator[str]:
    client = await connect(BusConfig(servers=[url]))
    try:
        async with serving_web(client, inspect=read_store, store_dirs=[store_dir], only=only, interval=0.2) as base:
            yield base
    finally:
        await close_quietly(client)


@asynccontextmanager
async def agent_on(url: str, domain: Domain, store: Path) -> AsyncIterator[Agent]:
    client = await connect(BusConfig(servers=[url]))
    context = ContextConfig(window=32_000, system_prompt="You fix flaky tests.")
    agent = Agent(client, AgentConfig(agent_id="a1", domain=domain, store=store, context=context, heartbeat=1.0))
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(agent.run)
            yield agent
            tg.cancel_scope.cancel()
    finally:
        agent.close()
        await close_quietly(client)


async def test_every_view_shows_the_swarm_as_it_runs(nats_url: str, tmp_path: Path) -> None:
    domain = fresh_domain()
    async with serving_coordinator(nats_url), agent_on(nats_url, domain, tmp_path / "a1.db") as agent:
        agent.user("Fix the flaky test. Never touch vendor/.")
        agent.assistant("Running.", tool_calls=[{"id": "c1", "name": "bash", "arguments": '{"cmd": "pytest"}'}])
        await agent.tool_result("bash", "3 passed, 1 failed: tests/test_cache.py::test_ttl", call_id="c1")
        agent.compose()
        assert isinstance(await agent.propose(SetGoal(text="make the cache safe")), Committed)
        assert isinstance(await agent.propose(Reject(option="redis lock", reason="no redis in prod")), Committed)
        refused = await agent.propose(AddDecision(option="Redis lock"))
        assert isinstance(refused, Rejection)
        async with web(nats_url, tmp_path) as base:
            status, page = await anyio.to_thread.run_sync(
                lambda: (lambda r: (r.status, r.read().decode()))(urllib.request.urlopen(base + "/", timeout=30))
            )
            assert status == 200 and "/static/app.js" in page
            status, _ = await anyio.to_thread.run_sync(
                lambda: (lambda r: (r.status, r.read()))(
                    urllib.request.urlopen(base + "/static/vendor/uplot/uPlot.iife.min.js", timeout=30)
                )
            )
            assert status == 200

            async def swarm_has_agent() -> Json | None:
                _, swarm = await get(base + "/api/swarm")
                mine = [d for d in swarm["domains"] if d["domain"] == str(domain)]
                agents = mine[0]["agents"] if mine else []
                return swarm if agents and agents[0]["store"] and agents[0]["prompt"] else None

            swarm = await until(swarm_has_agent, "the agent in /api/swarm")
            (row,) = [d for d in swarm["domains"] if d["domain"] == str(domain)][0]["agents"]
            assert row["agent"] == "a1" and not row["stale"] and row["band"] == "quiet"
            assert row["prompt"] > 0 and row["T"] > 0
            assert any(c["state"] == "serving" for c in swarm["coordinators"])

            agent_url = f"{base}/api/agent?domain={domain}&agent=a1"

            async def two_samples() -> Json | None:
                _, shown = await get(agent_url)
                return shown if len(shown["samples"]) >= 2 and shown["samples"][-1]["layers"] else None

            shown = await until(two_samples, "samples with layers in /api/agent")
            assert shown["thresholds"] == {"gentle": 0.2, "firm": 0.4, "urgent": 0.6, "channel2": 0.75}
            assert all(s["T"] > 0 for s in shown["samples"][1:]) and shown["samples"][-1]["band"] == "quiet"
            names = [layer["layer"] for layer in shown["layers"]]
            assert "system" in names and "rolling" in names
            rolling = next(layer for layer in shown["layers"] if layer["layer"] == "rolling")
            assert any("3 passed, 1 failed" in item["text"] for item in rolling["items"])
            assert any(item["tag"] is not None for item in rolling["items"])
            assert shown["samples"][-1]["layers"]["rolling"] == rolling["tokens"]

            status, brief = await get(f"{base}/api/brief?domain={domain}")
            assert status == 200 and brief["brief"]["revision"] == 2
            assert brief["brief"]["rejected"] == [
                {"option": "redis lock", "reason": "no redis in prod", "by": "a1", "revision": 2}
            ]
            kinds = [(r["revision"], r["kind"]) for r in brief["timeline"]]
            assert kinds == [(1, "commit"), (2, "rejection")]
            assert "no redis in prod" in brief["timeline"][1]["text"]
            assert brief["refused"].get("rejected_option", 0) >= 1
            _, searched = await get(f"{base}/api/brief?domain={domain}&q=REDIS")
            assert [r["revision"] for r in searched["timeline"]] == [2]

            status, at_one = await get(f"{base}/api/brief/revision?domain={domain}&revision=1")
            assert status == 200 and at_one["brief"]["revision"] == 1
            assert "make the cache safe" in at_one["brief"]["text"] and at_one["brief"]["rejected"] == []
            _, at_two = await get(f"{base}/api/brief/revision?domain={domain}&revision=2")
            assert at_two["brief"]["hash"] == brief["brief"]["hash"]

            async def latency() -> Json | None:
                _, health = await get(base + "/api/health")
                return health if any(m["commits"] >= 2 for m in health["commit_latency"].values()) else None

            health = await until(latency, "commit latency in /api/health")
            assert health["rejections"].get("rejected_option", 0) >= 1
            assert all(m["mean_ms"] > 0 for m in health["commit_latency"].values() if m["commits"])
            assert any(c["state"] == "serving" for c in health["coordinators"])


async def test_a_dead_letter_shows_in_health(nats_url: str, tmp_path: Path) -> None:
    domain = fresh_domain()
    async with serving_coordinator(nats_url) as serving, web(nats_url, tmp_path) as base:
        await publish(serving.client, subject(domain, Verb.PROPOSE), b"\xc1 not msgpack")

        async def letter() -> Json | None:
            _, health = await get(base + "/api/health")
            return health if health["recent_dead_letters"] else None

        health = await until(letter, "a dead letter in /api/health")
        (seen,) = health["recent_dead_letters"]
        assert seen["domain"] == str(domain) and seen["subject"] == subject(domain, Verb.PROPOSE)
        assert health["dead_letters_seen"] == {seen["reason"]: 1}

        async def counted() -> Json | None:
            _, health = await get(base + "/api/health")
            return health if health["dead_letters"].get(seen["reason"]) else None

        await until(counted, "the coordinator's dead-letter count in /api/health")


async def test_bad_parameters_get_a_clear_error_and_the_server_keeps_serving(nats_url: str, tmp_path: Path) -> None:
    domain = fresh_domain()
    async with serving_coordinator(nats_url) as serving:
        client = serving.client
        from ctxbus.agents.brief import Proposer

        reply = await Proposer(client, domain, agent_id="a1").propose(SetGoal(text="goal"), key="k1", deadline=10)
        assert isinstance(reply, Committed)
        other = fresh_domain()
        async with web(nats_url, tmp_path) as base, web(nats_url, tmp_path, only=domain) as narrow:
            cases = [
                (f"{base}/api/brief", 400, "missing parameter: domain"),
                (f"{base}/api/brief?domain=not-a-domain", 400, "bad domain"),
                (f"{base}/api/agent?domain=a/b", 400, "bad domain"),
                (f"{base}/api/brief?domain={other}", 404, "unknown domain"),
                (f"{base}/api/agent?domain={other}&agent=a1", 404, "unknown domain"),
                (f"{base}/api/agent?domain={domain}", 400, "missing parameter: agent"),
                (f"{base}/api/agent?domain={domain}&agent=ghost", 404, "no agent 'ghost'"),
                (f"{base}/api/brief/revision?domain={domain}&revision=abc", 400, "bad revision 'abc'"),
                (f"{base}/api/brief/revision?domain={domain}&revision=0", 400, "revisions start at 1"),
                (f"{base}/api/brief/revision?domain={domain}", 400, "bad revision"),
                (f"{base}/api/brief/revision?domain={domain}&revision=99", 404, "revision 99 is not committed"),
                (f"{base}/api/nothing", 404, "Not Found"),
                (f"{narrow}/api/brief?domain={other}", 404, "unknown domain"),
            ]
            for url, code, words in cases:
                status, body = await get(url)
                assert (status, body["status"]) == (code, code), (url, body)
                assert words in body["error"], (url, body)
                status, _ = await get(base + "/api/swarm")
                assert status == 200
            status, shown = await get(f"{narrow}/api/brief?domain={domain}")
            assert status == 200 and shown["brief"]["revision"] == 1
            _, swarm = await get(narrow + "/api/swarm")
            assert [d["domain"] for d in swarm["domains"]] == [str(domain)]


async def test_events_stream_ticks(nats_url: str, tmp_path: Path) -> None:
    async with serving_coordinator(nats_url), web(nats_url, tmp_path) as base:

        def read_ticks() -> list[int]:
            versions = []
            with urllib.request.urlopen(base + "/api/events", timeout=30) as stream:
                assert stream.headers["Content-Type"].startswith("text/event-stream")
                for line in stream:
                    if line.startswith(b"data: "):
                        versions.append(json.loads(line[6:])["version"])
                        if len(versions) == 3:
                            return versions
            return versions

        versions = await anyio.to_thread.run_sync(read_ticks)
        assert len(versions) == 3 and versions == sorted(set(versions))


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3", "example.org"])
def test_a_host_other_than_loopback_needs_credentials(host: str) -> None:
    shown = CliRunner().invoke(app, ["web", "--host", host], env={"CTXBUS_CREDENTIALS": ""})
    assert shown.exit_code == 2
    assert "not a loopback address" in shown.output


async def test_a_frozen_coordinator_and_a_stale_agent_are_marked(
    nats_server: EmbeddedServer, nats_url: str, tmp_path: Path, ctxbus_coordinator_factory: CoordinatorFactory
) -> None:
    domain = fresh_domain()
    name = f"web-frozen-{domain.task}"
    coordinator = ctxbus_coordinator_factory(nats_server, coordinator_id=name)
    client = await connect(BusConfig(servers=[nats_url]))
    try:
        # What an agent frozen a minute ago leaves behind: its last heartbeat, kept a while.
        beat = Presence(agent="frozen", band="firm", unused_tokens=5, tail_tokens=10, at=time.time() - 60)
        await Bucket(client, BucketConfig(name=PRESENCE_BUCKET)).put(kv_key(domain, "frozen"), beat.encode(), ttl=600)
        async with web(nats_url, tmp_path) as base:

            async def state_of_coordinator() -> str | None:
                _, swarm = await get(base + "/api/swarm")
                return next((c["state"] for c in swarm["coordinators"] if c["coordinator"] == name), None)

            await until(lambda: _equal(state_of_coordinator(), "serving"), "the coordinator serving")
            _, swarm = await get(base + "/api/swarm")
            (row,) = next(d for d in swarm["domains"] if d["domain"] == str(domain))["agents"]
            assert row["stale"] and row["age_s"] >= 60 and row["band"] == "firm"
            assert coordinator.pid is not None
            os.kill(coordinator.pid, signal.SIGSTOP)
            try:
                await until(lambda: _equal(state_of_coordinator(), "not answering"), "the coordinator not answering")
                _, health = await get(base + "/api/health")
                (frozen,) = [c for c in health["coordinators"] if c["coordinator"] == name]
                assert frozen["state"] == "not answering" and frozen["last_heartbeat_s"] is not None
            finally:
                os.kill(coordinator.pid, signal.SIGCONT)
            coordinator.stop()
            await until(lambda: _equal(state_of_coordinator(), "stopped"), "the coordinator stopped")
    finally:
        await close_quietly(client)


async def _equal(value: Any, expected: Any) -> bool:
    return bool(await value == expected)


def test_a_port_in_use_is_a_clear_error(nats_url: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        shown = subprocess.run(
            [sys.executable, "-m", "ctxbus.coordinator.cli", "web", "--nats", nats_url, "--port", str(port)],
            capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "200"},
        )  # fmt: skip
    assert shown.returncode == 2, shown.stderr
    assert f"cannot listen on 127.0.0.1:{port}" in shown.stderr
    assert "Traceback" not in shown.stderr
