"""A damaged agent store is refused with a clear error naming it, and nothing is lost silently.

Real files, damaged as a disk or a careless command would: emptied, cut short, the header
or a page in the middle overwritten, and a disk that fills up mid-write (RLIMIT_FSIZE).
Each is opened as an agent would (`LocalContext`), read as `inspect_store` does, and
inspected with `ctxbus inspect` as a user would.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from ctxbus.agents.context import LocalContext, StoreError, Tokenizer
from ctxbus.agents.runtime import inspect_store
from ctxbus.schemas import Domain

DOMAIN = Domain.parse("alice/s1/t1")
PAGE = 4096  # SQLite's default page size, which the stores use


def _store(path: Path, tokenizer: Tokenizer, messages: int = 120) -> Path:
    """A closed store of many pages (each message ~1.5 kB, distinct)."""
    with LocalContext(path, DOMAIN, tokenizer=tokenizer) as context:
        context.add("user", "Keep the retry budget at 3. Never touch the billing code.")
        for i in range(messages):
            context.add("assistant", f"step {i}: " + " ".join(f"w{i}x{j}" for j in range(250)))
    assert not Path(f"{path}-wal").exists(), "closing checkpoints the WAL into the file"
    return path


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _truncated(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2 + 123)


def _header_overwritten(path: Path) -> None:
    with path.open("r+b") as file:
        file.write(b"#!/bin/sh\necho overwritten by a script gone wrong\n" * 2)


def _middle_page_overwritten(path: Path) -> None:
    pages = path.stat().st_size // PAGE
    assert pages >= 20, f"the store must span many pages, has {pages}"
    with path.open("r+b") as file:
        file.seek((pages // 2) * PAGE)
        file.write(b"\xde\xad\xbe\xef" * (PAGE // 4))


DAMAGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "zero-length": (_empty, r"is empty \(0 bytes\)"),
    "truncated": (_truncated, "malformed"),
    "overwritten header": (_header_overwritten, "is not a SQLite database"),
    "overwritten middle page": (_middle_page_overwritten, "malformed"),
}
ADVICE = "Restore it from a backup"


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return Tokenizer.load()


@pytest.mark.parametrize("damage", DAMAGES)
def test_a_damaged_store_is_refused_naming_it_and_left_as_it_is(
    damage: str, tmp_path: Path, tokenizer: Tokenizer
) -> None:
    path = _store(tmp_path / "a1.db", tokenizer)
    harm, what = DAMAGES[damage]
    harm(path)
    damaged = path.read_bytes()

    with pytest.raises(StoreError, match=what) as opened:
        LocalContext(path, DOMAIN, tokenizer=tokenizer)
    assert str(path) in str(opened.value) and ADVICE in str(opened.value)
    with pytest.raises(StoreError, match=what) as inspected:
        inspect_store(path, DOMAIN)
    assert str(path) in str(inspected.value) and ADVICE in str(inspected.value)

    assert path.read_bytes() == damaged, "a refused store is not written to: what is left of it stays"
    assert not Path(f"{path}-wal").exists()


@pytest.mark.parametrize("damage", DAMAGES)
def test_ctxbus_inspect_of_a_damaged_store_is_one_line_not_a_traceback(
    damage: str, tmp_path: Path, tokenizer: Tokenizer
) -> None:
    path = _store(tmp_path / "a1.db", tokenizer)
    DAMAGES[damage][0](path)
    env = {**os.environ, "CTXBUS_STATE_DIR": str(tmp_path), "COLUMNS": "300"}
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "ctxbus.coordinator.cli",
            "inspect",
            "a1",
            "--domain",
            str(DOMAIN),
            "--store",
            str(path),
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert out.returncode == 1, out.stdout + out.stderr
    assert "Traceback" not in out.stderr
    assert out.stderr.startswith("ctxbus: error:") and str(path) in out.stderr and ADVICE in out.stderr
    assert out.stdout == ""


_FILL_THE_DISK = textwrap.dedent(
    """
    import json, os, resource, signal, sys
    from ctxbus.agents.context import LocalContext, StoreError

    path = sys.argv[1]
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # so a write past the limit fails with EFBIG
    context = LocalContext(path, "alice/s1/t1")
    context.add("user", "Keep the retry budget at 3.")
    context.flush()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (256 * 1024, hard))  # every file of this process
    context.add("tool", "\\n".join(f"log line {i} of the build" for i in range(60_000)), tool_name="bash")
    try:
        context.flush()
        failure = None
    except StoreError as exc:
        failure = str(exc)
    resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))  # space again: the same change goes in
    context.close()
    print(json.dumps({"failure": failure}))
    """
)


def test_a_full_disk_is_a_store_error_and_the_change_goes_in_once_there_is_room(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    path = tmp_path / "agent.db"
    script = tmp_path / "fill.py"
    script.write_text(_FILL_THE_DISK)
    out = subprocess.run(
        [sys.executable, str(script), str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).resolve().parents[2],
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert out.returncode == 0, out.stderr
    failure = json.loads(out.stdout)["failure"]
    assert failure is not None, "a write past the file-size limit must fail"
    assert f"cannot write context store {str(path)!r}" in failure
    assert "free space on its disk" in failure and "nothing of this change was written" in failure
    with LocalContext(path, DOMAIN, tokenizer=tokenizer) as context:
        messages = context.messages()
    assert [m.content.split("\n")[0] for m in messages] == ["Keep the retry budget at 3.", "log line 0 of the build"]
    assert messages[1].content.endswith("log line 59999 of the build"), "nothing of the change was lost"
