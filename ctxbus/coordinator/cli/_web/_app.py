"""The page's HTTP side: a Starlette app with a JSON endpoint per view, server-sent events
for live updates, and the static page; `serving_web` runs it on uvicorn."""

from __future__ import annotations

import contextlib
import ipaddress
import json
import logging
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Iterable, Iterator
from pathlib import Path
from typing import Any, Final

import anyio
import uvicorn
from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import FileResponse, JSONResponse, Response, StreamingResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from ctxbus.agents.context import LayerView, authored_note
from ctxbus.bus import BriefLog, BusError, NatsClient, Verifier
from ctxbus.coordinator import CoordinatorView
from ctxbus.coordinator.cli._web._brief import BriefHistory, RevisionUnknown, brief_json
from ctxbus.coordinator.cli._web._store import REMINDER_MARK
from ctxbus.coordinator.cli._web._watch import BANDS, AgentTrack, Inspect, Watcher
from ctxbus.schemas import Domain, InvalidDomain

__all__ = ["THRESHOLDS", "create_app", "is_loopback", "serving_web"]

log = logging.getLogger(__name__)

STATIC: Final = Path(__file__).with_name("static")
THRESHOLDS: Final = {"gentle": 0.20, "firm": 0.40, "urgent": 0.60, "channel2": 0.75}
"""Shares U/T where each band starts (docs/ARCHITECTURE.md, section 4), drawn on the chart."""
READ_LIMIT: Final = 10.0
"""Seconds a request may spend reading a log before it is answered 503."""
KEEPALIVE: Final = 15.0
"""Seconds between comments on a quiet event stream, so proxies keep it open."""


def is_loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or `localhost`)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _problem(status: int, message: str) -> HTTPException:
    return HTTPException(status_code=status, detail=message)


async def _json_error(request: Request, exc: Exception) -> Response:
    if isinstance(exc, HTTPException):
        return JSONResponse({"error": exc.detail, "status": exc.status_code}, status_code=exc.status_code)
    log.exception("%s %s failed", request.method, request.url.path)
    return JSONResponse({"error": f"internal error: {exc}", "status": 500}, status_code=500)


def create_app(watcher: Watcher, history: BriefHistory) -> Starlette:
    """The app: `/` (the page), `/static/...`, `/api/{swarm,agent,brief,brief/revision,health,events}`."""

    async def page(_: Request) -> Response:
        return FileResponse(STATIC / "index.html")

    async def swarm(_: Request) -> Response:
        now = time.time()
        domains = []
        for domain in watcher.domains():
            tracks = [t for (d, _), t in sorted(watcher.agents.items(), key=lambda kv: kv[0][1]) if d == domain]
            caching = [v.coordinator for v in watcher.coordinators if v.status and str(domain) in v.status.domains]
            domains.append(
                {"domain": str(domain), "agents": [_agent_row(t, now) for t in tracks], "coordinators": caching}
            )
        return JSONResponse(
            {
                "polled_at": watcher.polled_at,
                "tenant": watcher.tenant,
                "domains": domains,
                "coordinators": [_coordinator(v, now) for v in watcher.coordinators],
            }
        )

    def domain_param(request: Request) -> Domain:
        text = request.query_params.get("domain")
        if not text:
            raise _problem(400, "missing parameter: domain (user/session/task)")
        try:
            domain = Domain.parse(text)
        except InvalidDomain as exc:
            raise _problem(400, f"bad domain {text!r}: {exc}") from None
        return domain

    async def known_domain(request: Request) -> Domain:
        """A domain the page may show: seen in a heartbeat, a status or its log."""
        domain = domain_param(request)
        if not watcher.visible(domain):
            raise _problem(404, f"unknown domain {domain}")
        if domain in watcher.domains():
            return domain
        state, _ = await _read_brief(domain)
        if state.seq == 0:
            raise _problem(404, f"unknown domain {domain}: no agent, no coordinator and no log entry names it")
        return domain

    async def _read_brief(domain: Domain) -> Any:
        if not watcher.client.is_connected:  # a read now would only wait for its timeout
            raise _problem(503, "disconnected from NATS, reconnecting: the log cannot be read now")
        try:
            with anyio.fail_after(READ_LIMIT):
                return await history.current(domain)
        except (BusError, TimeoutError) as exc:
            raise _problem(503, f"cannot read the log of {domain}: {exc or 'no answer'}") from None

    async def agent(request: Request) -> Response:
        domain = await known_domain(request)
        name = request.query_params.get("agent")
        if not name:
            raise _problem(400, "missing parameter: agent")
        track = watcher.agents.get((domain, name))
        if track is None:
            raise _problem(404, f"no agent {name!r} on {domain} (agents that stop cleanly leave)")
        now = time.time()
        return JSONResponse(
            {
                **_agent_row(track, now),
                "thresholds": THRESHOLDS,
                "bands": list(BANDS),
                "samples": [s.as_json() for s in track.samples],
                "events": Watcher.events_of(track),
                "store": None if track.store is None else str(track.store),
                "store_note": track.store_note,
                "layers": None if track.layers is None else _layers_json(track.layers),
            }
        )

    async def brief(request: Request) -> Response:
        domain = await known_domain(request)
        state, rows = await _read_brief(domain)
        query = request.query_params.get("q", "").strip().lower()
        if query:
            rows = [r for r in rows if query in json.dumps(r).lower()]
        try:
            with anyio.fail_after(READ_LIMIT):
                snapshot = await history.snapshot(domain)
        except (BusError, TimeoutError):
            snapshot = None
        return JSONResponse(
            {
                "domain": str(domain),
                "seq": state.seq,
                "brief": brief_json(state.brief),
                "timeline": rows,
                "snapshot": snapshot,
                "refused": _sum(v.status.rejections for v in watcher.coordinators if v.status),
            }
        )

    async def brief_revision(request: Request) -> Response:
        domain = await known_domain(request)
        text = request.query_params.get("revision", "")
        try:
            revision = int(text)
        except ValueError:
            raise _problem(400, f"bad revision {text!r}: a whole number from 1") from None
        if revision < 1:
            raise _problem(400, f"bad revision {revision}: revisions start at 1")
        state, _ = await _read_brief(domain)
        if revision > state.brief.revision:
            raise _problem(404, f"revision {revision} is not committed: {domain} is at {state.brief.revision}")
        try:
            with anyio.fail_after(READ_LIMIT):
                at = await history.at_revision(domain, revision)
        except RevisionUnknown as exc:
            raise _problem(404, str(exc)) from None
        except (BusError, TimeoutError) as exc:
            raise _problem(503, f"cannot read the log of {domain}: {exc}") from None
        return JSONResponse({"domain": str(domain), "brief": brief_json(at)})

    async def health(_: Request) -> Response:
        now = time.time()
        statuses = [v.status for v in watcher.coordinators if v.status]
        last_errors: list[dict[str, object]] = [
            {"source": s.coordinator, "at": s.last_error_at, "text": s.last_error}
            for s in statuses
            if s.last_error is not None
        ]
        last_errors += [dict(e) for e in watcher.errors]
        last_errors.sort(key=lambda e: float(e["at"] or 0.0), reverse=True)  # type: ignore[arg-type]
        recent = list(watcher.dead_letters)
        return JSONResponse(
            {
                "polled_at": watcher.polled_at,
                "coordinators": [_coordinator(v, now) for v in watcher.coordinators],
                "dead_letters": _sum(s.dead_letters for s in statuses),
                "dead_letters_seen": dict(Counter(str(d["reason"]) for d in recent)),
                "recent_dead_letters": recent[-50:][::-1],
                "rejections": _sum(s.rejections for s in statuses),
                "expired": _sum(s.expired for s in statuses),
                "self_check_failures": sum(s.self_check_failures for s in statuses),
                "commit_latency": watcher.metrics,
                "last_errors": last_errors[:20],
            }
        )

    async def events(request: Request) -> Response:
        async def stream() -> AsyncIterator[str]:
            seen = -1
            yield "retry: 2000\n\n"
            while True:
                version = watcher.version if seen < 0 else await watcher.changed(KEEPALIVE)
                if version == seen:
                    yield ": keepalive\n\n"
                    continue
                seen = version
                yield f"event: tick\ndata: {json.dumps({'version': version, 'at': watcher.polled_at})}\n\n"

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})

    routes = [
        Route("/", page),
        Route("/api/swarm", swarm),
        Route("/api/agent", agent),
        Route("/api/brief", brief),
        Route("/api/brief/revision", brief_revision),
        Route("/api/health", health),
        Route("/api/events", events),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: _json_error, Exception: _json_error})


def _sum(counts: Iterable[dict[str, int]]) -> dict[str, int]:
    total: Counter[str] = Counter()
    for c in counts:
        total.update(c)
    return dict(sorted(total.items()))


def _layers_json(layers: tuple[LayerView, ...]) -> list[dict[str, Any]]:
    """The layers as `ctxbus inspect --json` gives them, items marked where they hold a
    reminder, the authored layer with a line on the user's share and what of it is compressed."""
    out = []
    for view in layers:
        shown = view.as_dict()
        for item in shown["items"]:
            item["reminder"] = REMINDER_MARK in item["text"]
        if view.name == "authored":
            shown["note"] = authored_note(layers)
        out.append(shown)
    return out


def _agent_row(track: AgentTrack, now: float) -> dict[str, object]:
    p = track.presence
    return {
        "domain": str(track.domain),
        "agent": track.agent,
        "band": p.band,
        "U": p.unused_tokens,
        "T": p.tail_tokens,
        "severity": round(p.unused_tokens / p.tail_tokens, 3) if p.tail_tokens else 0.0,
        "prompt": p.prompt_tokens,
        "cached_share": p.cached_share,
        "lag": p.lag,
        "revision": p.brief_revision,
        "stale": p.stale(now),
        "age_s": round(p.age(now), 1),
        "store": track.store is not None,
    }


def _coordinator(view: CoordinatorView, now: float) -> dict[str, object]:
    silent = view.silent_for(now)
    status = view.status.model_dump(mode="json") if view.status else {}
    return {**status, "coordinator": view.coordinator, "state": view.state.value,
            "last_heartbeat_s": None if silent is None else round(silent, 1)}  # fmt: skip


class _Server(uvicorn.Server):
    """uvicorn without its own signal handlers: the command that runs it owns them."""

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield


@contextlib.asynccontextmanager
async def serving_web(
    client: NatsClient,
    *,
    inspect: Inspect,
    host: str = "127.0.0.1",
    port: int = 0,
    store_dirs: Iterable[Path] = (),
    tenant: str | None = None,
    only: Domain | None = None,
    verifier: Verifier | None = None,
    interval: float = 1.0,
) -> AsyncIterator[str]:
    """Serve the page on `host:port` (0: any free port) until the block ends; yields its URL.

    :raises OSError: if the address cannot be bound (a port in use, a host not here).
    """
    watcher = Watcher(client, inspect=inspect, store_dirs=store_dirs, tenant=tenant, only=only, interval=interval)
    history = BriefHistory(BriefLog(client, verifier=verifier))
    app = create_app(watcher, history)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    bound = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="off", timeout_graceful_shutdown=1, access_log=False)
    server = _Server(config)
    done = anyio.Event()

    async def serve() -> None:
        try:
            await server.serve([sock])
        finally:
            done.set()

    async with anyio.create_task_group() as tg:
        await tg.start(watcher.run)
        tg.start_soon(serve)
        while not server.started and not done.is_set():
            await anyio.sleep(0.02)
        shown = f"[{host}]" if ":" in host else host
        try:
            yield f"http://{shown}:{bound}"
        finally:
            server.should_exit = True
            with anyio.CancelScope(shield=True), anyio.move_on_after(5):
                await done.wait()
            sock.close()
            tg.cancel_scope.cancel()
