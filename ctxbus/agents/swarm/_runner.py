"""The swarm runner: N agent processes on one domain, one of them killed and restarted.

It starts each agent as its own OS process (`_worker`), follows their progress lines,
SIGKILLs the victim once it has done `kill_at` steps and starts it again on the same
store, then, when every agent has finished, asks them all to report at the log's
revision. The NATS server and the coordinator are the caller's: `agents` never imports
`coordinator`, so the CLI starts them and hands the runner a URL.

A run that logged an error has failed, whatever else it shows: the runner collects the
ERROR records of its own process while it runs (a coordinator running beside it, as in
the demo, included) and the ERROR lines of every agent's log.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from subprocess import PIPE
from typing import Final

import anyio
from anyio.abc import Process
from anyio.streams.buffered import BufferedByteReceiveStream
from pydantic import ValidationError

from ctxbus.agents.swarm._config import RUNNER_CREDENTIALS, SwarmError, SwarmPlan
from ctxbus.agents.swarm._report import LogState, SwarmReport
from ctxbus.agents.swarm._scenario import agent_name
from ctxbus.bus import BriefLog, BriefState, BusConfig, Credentials, close_quietly, connect
from ctxbus.schemas import AgentResult, EventAdapter, Finished, Note, Progress, ReportRequest, TaskBrief, brief_hash

__all__ = ["AgentStatus", "SwarmRunner"]

log = logging.getLogger(__name__)

_MAX_LINE: Final = 1 << 20
_EVENTS_KEPT: Final = 500
_FINAL: Final = frozenset({"reported", "failed"})
"""States an agent keeps once the run is over; any other means it was stopped."""
_ERROR_LEVELS: Final = (" ERROR ", " CRITICAL ")
"""How an error shows in an agent's log line (the worker's format: time, level, logger)."""
_ERRORS_KEPT: Final = 1000
"""Error records kept from this process, at most: a flood of them is one failure anyway."""


@dataclass
class AgentStatus:
    """What the runner knows about one agent right now; the live view reads it."""

    name: str
    state: str = "starting"
    """starting, running, killed, finished, reported, failed, or stopped (the run ended
    before the agent reported: interrupted or out of time)."""
    pid: int | None = None
    progress: Progress | None = None
    result: AgentResult | None = None
    exit_codes: list[int] = field(default_factory=list)
    killed_at: int | None = None
    """The step count the runner saw when it sent SIGKILL."""
    finished: anyio.Event = field(default_factory=anyio.Event, repr=False)


class _ErrorRecords(logging.Handler):
    """Keeps the ERROR records (and worse) logged while a run goes, as one line each."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if len(self.lines) < _ERRORS_KEPT:
            self.lines.append(f"{record.levelname} {record.name}: {record.getMessage()}")


class SwarmRunner:
    """Runs one swarm; `agents` and `events` show its progress while `run` is going."""

    def __init__(self, config: SwarmPlan) -> None:
        self.config = config
        self.agents = [AgentStatus(agent_name(i)) for i in range(config.agents)]
        self.events: deque[Note] = deque(maxlen=_EVENTS_KEPT)
        """The latest events; older ones fall off the front."""
        self.events_seen = 0
        """Events recorded since the start, those fallen off `events` included."""
        self._processes: dict[str, Process] = {}
        self._agents_dir = config.data_dir / "agents"

    def __repr__(self) -> str:
        states = ", ".join(f"{a.name}={a.state}" for a in self.agents)
        return f"<SwarmRunner {self.config.domain} {states}>"

    async def run(self) -> SwarmReport:
        """Run every agent to the end and return the report, judged: `failures` names
        each broken invariant, and `ok` is True when there is none.

        :raises SwarmError: if the swarm does not finish within the deadline.
        """
        self._agents_dir.mkdir(parents=True, exist_ok=True)
        started = time.monotonic()
        limit = self.config.time_limit
        errors = _ErrorRecords()
        logging.getLogger().addHandler(errors)
        try:
            with anyio.fail_after(limit):
                async with anyio.create_task_group() as tg:
                    for index, status in enumerate(self.agents):
                        tg.start_soon(self._supervise, index, status)
                    state = await self._report_barrier()
        except TimeoutError:
            raise SwarmError(
                f"the swarm did not finish within {limit:.0f}s (--deadline); agent logs are in {self._agents_dir}"
            ) from None
        finally:
            logging.getLogger().removeHandler(errors)
            with anyio.CancelScope(shield=True):
                for process in list(self._processes.values()):
                    if process.returncode is None:
                        process.kill()
                        await process.wait()
            for status in self.agents:
                if status.state not in _FINAL:
                    status.state = "stopped"
        logged = [f"swarm runner: {line}" for line in errors.lines] + self._agent_errors()
        return SwarmReport.build(self.config, self.agents, state, logged, elapsed=time.monotonic() - started)

    async def _report_barrier(self) -> LogState:
        """Wait until every agent finished, then ask each to report at the log's revision.

        The log's brief is read twice: as a joining agent reads it (the latest snapshot,
        then the log after it) and replayed from the log's first entry; the report
        checks that they agree.
        """
        for status in self.agents:
            await status.finished.wait()
        client = await connect(self._bus_config(RUNNER_CREDENTIALS, name="swarm-runner"))
        try:
            log = BriefLog(client)
            snapshot = await log.load_snapshot(self.config.domain)  # the one `load` starts from: no commit comes now
            joined = await log.load(self.config.domain)
            replayed = await log.catch_up(BriefState(TaskBrief(domain=self.config.domain), 0), until=joined.seq)
        finally:
            await close_quietly(client)
        request = (ReportRequest(revision=joined.brief.revision).model_dump_json() + "\n").encode()
        for status in self.agents:
            process = self._processes.get(status.name)
            if status.state == "finished" and process is not None and process.stdin is not None:
                await process.stdin.send(request)
        return LogState(
            revision=joined.brief.revision,
            hash=brief_hash(joined.brief),
            replay_hash=brief_hash(replayed.brief),
            snapshot_revision=snapshot.brief.revision,
        )

    def _bus_config(self, principal: str, *, name: str) -> BusConfig:
        path = self.config.credentials(principal)
        credentials = None if path is None else Credentials.load(path)
        return BusConfig(servers=[self.config.nats_url], name=name, credentials=credentials)

    def _agent_errors(self) -> list[str]:
        """The ERROR lines of every agent's log, named by agent (both lives of the victim)."""
        found = []
        for status in self.agents:
            path = self._log_path(status)
            if not path.exists():
                continue
            with path.open(encoding="utf-8", errors="replace") as lines:
                found += [f"{status.name}: {line.strip()}" for line in lines if any(lv in line for lv in _ERROR_LEVELS)]
        return found

    async def _supervise(self, index: int, status: AgentStatus) -> None:
        """Run the agent's process; after the planned SIGKILL, start it again once."""
        while True:
            code = await self._run_process(index, status)
            status.exit_codes.append(code)
            if status.state == "killed" and len(status.exit_codes) == 1:
                self._note(status, "restarting on its store")
                continue
            if status.state != "reported":
                status.state = "failed"
                self._note(status, f"exited with code {code} before reporting; see {self._log_path(status)}")
            status.finished.set()
            return

    async def _run_process(self, index: int, status: AgentStatus) -> int:
        with self._log_path(status).open("ab") as stderr:
            process = await anyio.open_process(self._command(index, status), stdin=PIPE, stdout=PIPE, stderr=stderr)
        self._processes[status.name] = process
        status.pid, status.state = process.pid, "running"
        assert process.stdout is not None
        lines = BufferedByteReceiveStream(process.stdout)
        while True:
            try:
                line = await lines.receive_until(b"\n", _MAX_LINE)
            except (anyio.EndOfStream, anyio.IncompleteRead):
                break
            self._on_line(status, process, line)
        return await process.wait()

    def _on_line(self, status: AgentStatus, process: Process, line: bytes) -> None:
        try:
            event = EventAdapter.validate_json(line)
        except ValidationError:
            log.warning("%s printed a line that is not an event: %r", status.name, line[:200])
            return
        match event:
            case Progress():
                status.progress = event
                due = status.name == self.config.victim and event.step >= self.config.victim_kill_at
                if due and status.killed_at is None:
                    status.killed_at, status.state = event.step, "killed"
                    process.kill()
                    self._note(status, f"SIGKILL (pid {process.pid}) after step {event.step}")
            case Note():
                self._record(event)
            case Finished():
                status.state = "finished"
                status.finished.set()
            case AgentResult():
                status.result, status.state = event, "reported"

    def _command(self, index: int, status: AgentStatus) -> list[str]:
        command = self.config.worker(index, self._agents_dir / f"{status.name}.db")
        path = self.config.credentials(status.name)
        return command + (["--credentials", str(path)] if path else [])

    def _log_path(self, status: AgentStatus) -> Path:
        return self._agents_dir / f"{status.name}.log"

    def _note(self, status: AgentStatus, text: str) -> None:
        step = status.progress.step if status.progress else 0
        self._record(Note(agent=status.name, step=step, text=f"[runner] {text}"))

    def _record(self, note: Note) -> None:
        self.events.append(note)
        self.events_seen += 1
