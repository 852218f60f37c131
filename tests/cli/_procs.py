"""CLI processes under test: output read with a deadline, and the whole process tree ended.

`ctxbus nats`, `up` and `swarm demo` start a nats-server in its own session and agent
workers, so killing the CLI alone orphans them. Linux only: children are found in /proc.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO

import pytest

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
"""Terminal escape sequences (colours, cursor moves) a live view is drawn with."""
READ_TIMEOUT = 30.0
"""Seconds a test waits for one line of output, or for a process to exit, before failing."""


def _stat(pid: int) -> list[str] | None:
    """Fields 3 on of `/proc/<pid>/stat` (index 0 is the state, 1 the ppid), or None if gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _parents() -> dict[int, int]:
    """Pid to parent pid, for every process now running."""
    found = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = _stat(pid := int(stat.parent.name))
        if fields is not None:
            found[pid] = int(fields[1])
    return found


def children(pid: int) -> list[int]:
    """Pids of the processes whose parent is `pid`."""
    return [child for child, parent in _parents().items() if parent == pid]


def descendants(pid: int) -> list[int]:
    """Pids of every process below `pid`, nearest first."""
    parents = _parents()
    found = [pid]
    for above in found:  # grows while it is walked
        found.extend(child for child, parent in parents.items() if parent == above)
    return found[1:]


@dataclass(frozen=True)
class Process:
    """A pid together with its start time, so a later process reusing the pid is not mistaken for it."""

    pid: int
    started: str

    @classmethod
    def of(cls, pid: int) -> Process | None:
        fields = _stat(pid)
        return None if fields is None else cls(pid, fields[19])  # field 22: start time

    @property
    def alive(self) -> bool:
        fields = _stat(self.pid)
        return fields is not None and fields[19] == self.started and fields[0] != "Z"

    def kill(self) -> None:
        if self.alive:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


class Command:
    """`python -m ctxbus.coordinator.cli *args` as a context manager (or `*program, *args`, for
    another program that starts servers or workers, such as a script of the README).

    Its stdout and stderr are read on threads, so `readline()` and `finish()` fail the test
    after a deadline instead of hanging it. On exit the process and everything below it are
    SIGKILLed if still running, including children seen earlier that it may have orphaned.
    """

    def __init__(
        self, *args: str, env: dict[str, str], program: Sequence[str] | None = None, cwd: Path | None = None
    ) -> None:
        command = [*program] if program is not None else [sys.executable, "-m", "ctxbus.coordinator.cli"]
        self.proc = subprocess.Popen(
            [*command, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
            cwd=cwd,
        )
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self._lines: queue.Queue[str] = queue.Queue()
        self._ended = False
        self._stderr: list[str] = []
        self._seen: set[Process] = set()
        self._readers = [
            threading.Thread(target=self._pump, args=(self.proc.stdout, self._lines.put), daemon=True),
            threading.Thread(target=self._pump, args=(self.proc.stderr, self._stderr.append), daemon=True),
        ]
        for reader in self._readers:
            reader.start()

    def __enter__(self) -> Command:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.kill()
        for reader in self._readers:
            reader.join(READ_TIMEOUT)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()

    @staticmethod
    def _pump(stream: IO[str], sink: Callable[[str], object]) -> None:
        """Copy lines to `sink`, then '' for the end."""
        for line in stream:
            sink(line)
        sink("")

    @property
    def stderr(self) -> str:
        """What the process wrote to stderr so far."""
        return "".join(self._stderr)

    def readline(self, timeout: float = READ_TIMEOUT) -> str:
        """The next line of stdout, or '' once it is closed; fails the test after `timeout` seconds."""
        if self._ended:
            return ""
        try:
            line: str | None = self._lines.get(timeout=timeout)
        except queue.Empty:
            line = None
        if line is None:  # failed outside the handler, so the report has no queue.Empty in it
            pytest.fail(f"no line on stdout within {timeout:.0f}s; stderr so far:\n{self.stderr}")
        self._ended = not line
        return line

    def read_until(self, shown: Callable[[str], bool]) -> bool:
        """Read until a line, terminal escapes removed, satisfies `shown` (True), or until
        the process ends or READ_TIMEOUT passes (False): for live views, redrawn all the
        time, whose lines keep coming whether or not the awaited one ever does."""
        deadline = time.monotonic() + READ_TIMEOUT
        try:
            while time.monotonic() < deadline:
                line = _ANSI.sub("", self.readline())
                if not line:
                    return False
                if shown(line):
                    return True
        except pytest.fail.Exception:  # no line at all for READ_TIMEOUT
            pass
        return False

    def children(self) -> list[int]:
        """Pids of the process's children, remembered so `kill()` ends them even once orphaned."""
        pids = children(self.proc.pid)
        self._seen.update(p for pid in pids if (p := Process.of(pid)))
        return pids

    def finish(self, timeout: float = READ_TIMEOUT) -> tuple[str, str]:
        """Wait for the process to exit; returns the stdout not yet read, and all of stderr."""
        try:
            self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pass
        if self.proc.returncode is None:
            pytest.fail(f"still running after {timeout:.0f}s; stderr so far:\n{self.stderr}")
        for reader in self._readers:
            reader.join(timeout)
        rest = []
        while not self._ended and (line := self.readline(timeout)):
            rest.append(line)
        return "".join(rest), self.stderr

    def orphans(self) -> list[int]:
        """Children seen earlier that are still running though they may have lost their parent."""
        return [p.pid for p in self._seen if p.alive]

    def kill(self) -> None:
        """SIGKILL the process and every process below it (no-op for those already gone)."""
        tree = set(self._seen)
        if self.proc.poll() is None:  # not reaped, so the pid is still ours
            os.kill(self.proc.pid, signal.SIGSTOP)  # no new children while the tree is read
            tree.update(p for pid in descendants(self.proc.pid) if (p := Process.of(pid)))
            self.proc.kill()
            self.proc.wait()
        for process in tree:
            process.kill()
