"""The optional `bash` tool: a shell command run in the loop's working directory.

Confined the way a plain process can be: it starts in the working directory (HOME and
TMPDIR point there too), runs in a process group of its own that is killed whole at the
timeout, and its output is cut to a cap, head and tail kept, so one `cat` of a big file
cannot flood the context (the full text is not kept: run a narrower command). It is not
a sandbox: the command runs as the agent's user and can reach anything that user can.
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Annotated, Final

import anyio
from pydantic import Field

from ctxbus.schemas import UsageError

__all__ = ["BASH_OUTPUT_CAP", "BASH_TIMEOUT", "BashTool"]

BASH_TIMEOUT: Final = 60.0
"""Seconds a command may run before its process group is killed."""
BASH_OUTPUT_CAP: Final = 30_000
"""Characters of output (stdout and stderr together) the model gets, at most."""


class BashTool:
    """`bash(command)` in `workdir`; pass the bound method `run` to `Toolbox.add` as `bash`."""

    def __init__(self, workdir: Path, *, timeout: float = BASH_TIMEOUT, output_cap: int = BASH_OUTPUT_CAP) -> None:
        """:raises UsageError: if `workdir` is not a directory, or a limit is not positive."""
        self.workdir = Path(workdir).resolve()
        if not self.workdir.is_dir():
            raise UsageError(f"the bash tool's working directory {self.workdir} is not a directory")
        if not timeout > 0 or output_cap < 200:
            raise UsageError(f"bash needs a timeout > 0 and an output cap >= 200, got {timeout} and {output_cap}")
        self.timeout = timeout
        self.output_cap = output_cap

    def __repr__(self) -> str:
        return f"<BashTool in {self.workdir}>"

    async def run(
        self, command: Annotated[str, Field(min_length=1, description="The command line, run by bash -c.")]
    ) -> str:
        """Run a shell command in the task's working directory and return its exit code and
        output (stdout and stderr together, long output cut in the middle)."""
        env = {**os.environ, "HOME": str(self.workdir), "TMPDIR": str(self.workdir), "PWD": str(self.workdir)}
        process = await anyio.open_process(
            ["bash", "-c", command],
            cwd=self.workdir,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, killed whole at the timeout
        )
        chunks: list[bytes] = []
        timed_out = False
        try:
            with anyio.move_on_after(self.timeout) as scope:
                assert process.stdout is not None
                async for chunk in process.stdout:
                    chunks.append(chunk)
                await process.wait()
            timed_out = scope.cancelled_caught
        finally:
            if process.returncode is None:
                _kill_group(process.pid)
                with anyio.CancelScope(shield=True):
                    await process.wait()
        output = self._cut(b"".join(chunks).decode("utf-8", errors="replace"))
        if timed_out:
            return f"killed after {self.timeout:g}s (timeout)\n{output}"
        return f"exit code {process.returncode}\n{output}"

    def _cut(self, text: str) -> str:
        if len(text) <= self.output_cap:
            return text
        keep = self.output_cap // 2
        cut = len(text) - 2 * keep
        return f"{text[:keep]}\n[... {cut:,} characters cut: run a narrower command ...]\n{text[-keep:]}"


def _kill_group(pid: int) -> None:
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
