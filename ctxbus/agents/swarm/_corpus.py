"""Deterministic, realistic tool output for the scripted swarm: grep hits, file reads,
pytest runs, diffs and CI logs about one small caching service.

The demo must run anywhere, so nothing is read from disk: text is generated from a
seeded random source, which also makes every run (and every restart) produce the same
bytes for the same step, as a real tool re-run on an unchanged tree would.

Every generator takes the seeded source, the tool's argument and the step it runs in;
only a CI log uses the step, for its run id.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Final

__all__ = ["CI_RUN_BASE", "TOOLS", "tool_output"]

CI_RUN_BASE: Final = 4_810_000
"""A CI log fetched at step N is run `CI_RUN_BASE + N`: one id per log of an agent,
so searching for it finds that log, and no number elsewhere in the corpus is that big."""

_MODULES: Final = ("cache", "writer", "invalidation", "ttl", "backend", "metrics", "locks", "config")
_FUNCS: Final = (
    "get", "put", "flush", "invalidate", "expire", "load_config", "acquire", "release",
    "evict", "refresh", "snapshot", "record_hit", "record_miss", "compact", "schedule",
)  # fmt: skip
_WORDS: Final = (
    "entry", "key", "ttl", "deadline", "writer", "lock", "stale", "generation", "backend",
    "shard", "bucket", "clock", "pending", "flushed", "version", "epoch", "hits", "misses",
)  # fmt: skip


def _ident(rng: random.Random) -> str:
    return f"{rng.choice(_WORDS)}_{rng.choice(_WORDS)}"


def _path(rng: random.Random, root: str = "service") -> str:
    return f"{root}/{rng.choice(_MODULES)}/{rng.choice(_MODULES)}.py"


def _code_line(rng: random.Random) -> str:
    a, b, f = _ident(rng), _ident(rng), rng.choice(_FUNCS)
    return rng.choice(
        (
            f"{a} = self.{f}({b}, timeout={rng.randint(1, 30)})",
            f"if {a} is None or {a}.expires_at < now:",
            f"return {f}({a}, {b}) if {a} else None",
            f"with self._lock.acquire(key={b!r}):",
            f"log.debug('{f} %s -> %s', {a}, {b})",
            f"self.{a}[{b}] = Entry(value={a}, generation=self.generation + 1)",
            f"raise CacheError(f'cannot {f} {{{a}}}: {{{b}}}')",
            f"for {a} in sorted(self.{b}, key=lambda e: e.deadline):",
        )
    )


def grep(rng: random.Random, query: str, step: int) -> str:
    """`rg -n QUERY service/ tests/`: ~115 hits."""
    lines = [f"$ rg -n {query!r} service/ tests/"]
    for _ in range(115):
        root = rng.choice(("service", "service", "tests"))
        lines.append(f"{_path(rng, root)}:{rng.randint(3, 640)}:    {_code_line(rng)}")
    lines.append(f"115 matches in {rng.randint(18, 40)} files")
    return "\n".join(lines)


def read_file(rng: random.Random, path: str, step: int) -> str:
    """`cat -n` of a Python module: ~150 numbered lines."""
    lines = [f'"""{path}: {rng.choice(_WORDS)} handling for the cache service."""', ""]
    for i in range(14):
        f = rng.choice(_FUNCS)
        lines += [f"def {f}_{i}(self, {_ident(rng)}: str, *, {_ident(rng)}: float = 0.0) -> bool:"]
        lines += [f'    """{rng.choice(_FUNCS).capitalize()} the {rng.choice(_WORDS)} under the writer lock."""']
        lines += [f"    {_code_line(rng)}" for _ in range(rng.randint(6, 10))]
        lines.append("")
    return "\n".join(f"{n:>5}\t{text}" for n, text in enumerate(lines, start=1))


def pytest_run(rng: random.Random, target: str, step: int) -> str:
    """A failing `pytest -x -q` run with a traceback and captured logs."""
    test = f"test_{rng.choice(_FUNCS)}_{rng.choice(_WORDS)}"
    lines = [f"$ pytest -q {target}", "=" * 30 + " test session starts " + "=" * 30]
    lines.append(f"platform linux -- Python 3.11.9, pytest-8.3.2, pluggy-1.5.0\ncollected {rng.randint(80, 140)} items")
    lines.append("".join(rng.choice("....F.s") for _ in range(70)))
    lines += ["", "=" * 30 + " FAILURES " + "=" * 30, f"_____ {test} _____", ""]
    for _ in range(6):
        lines.append(f"{_path(rng, 'tests')}:{rng.randint(10, 400)}: in {rng.choice(_FUNCS)}")
        lines += [f"    {_code_line(rng)}" for _ in range(5)]
    lines.append(f"E   AssertionError: expected generation {rng.randint(2, 9)}, got {rng.randint(10, 19)} (stale read)")
    lines += ["", "-" * 20 + " Captured log call " + "-" * 20]
    for _ in range(110):
        level = rng.choice(("DEBUG", "DEBUG", "INFO", "WARNING"))
        lines.append(
            f"{level:<8} service.{rng.choice(_MODULES)}:{rng.randint(20, 600)} {rng.choice(_FUNCS)} {_ident(rng)}={rng.randint(0, 9999)}"
        )
    lines.append(f"FAILED {target}::{test} - AssertionError: stale read after invalidate")
    lines.append(f"1 failed, {rng.randint(60, 120)} passed, 3 skipped in {rng.uniform(2, 9):.2f}s")
    return "\n".join(lines)


def diff(rng: random.Random, path: str, step: int) -> str:
    """`git diff` of a few hunks."""
    lines = [f"diff --git a/{path} b/{path}", "index 3f2a1c9..8b7d0e4 100644", f"--- a/{path}", f"+++ b/{path}"]
    for _ in range(11):
        start = rng.randint(10, 500)
        lines.append(f"@@ -{start},12 +{start},14 @@ def {rng.choice(_FUNCS)}(self):")
        for _ in range(13):
            mark = rng.choice("  -+")
            lines.append(f"{mark.strip() or ' '}       {_code_line(rng)}")
    return "\n".join(lines)


def ci_log(rng: random.Random, job: str, step: int) -> str:
    """A long CI job log (install, build, tests): the kind the context archives.

    Its `##[error]` line names the run; the run time alone would not tell two logs apart.
    """
    lines = [f"##[group]Run {job}", "Collecting dependencies from requirements.lock"]
    for i in range(200):
        pkg = f"{rng.choice(_WORDS)}-{rng.choice(_WORDS)}"
        lines.append(
            f"  Downloading {pkg}-{rng.randint(0, 9)}.{rng.randint(0, 30)}.{i}-py3-none-any.whl ({rng.randint(12, 900)} kB)"
        )
    for _ in range(230):
        lines.append(
            f"{_path(rng, 'tests')}::test_{rng.choice(_FUNCS)}_{rng.choice(_WORDS)} PASSED [{rng.randint(1, 99):>3}%]"
        )
    lines.append(f"{_path(rng, 'tests')}::test_invalidate_{rng.choice(_WORDS)} FAILED")
    lines.append("E   TimeoutError: lock 'cache-writer' not released after 5.0s (holder pid 4242)")
    run_time = rng.randint(300, 900)
    lines.append(f"##[error]Process completed with exit code 1 after {run_time}s (run {CI_RUN_BASE + step})")
    return "\n".join(lines)


def edit(rng: random.Random, path: str, step: int) -> str:
    """The confirmation an edit tool prints."""
    return f"Edited {path}: replaced {rng.randint(3, 14)} lines, added {rng.randint(1, 9)}."


TOOLS: Final[dict[str, Callable[[random.Random, str, int], str]]] = {
    "grep": grep,
    "read_file": read_file,
    "pytest": pytest_run,
    "git_diff": diff,
    "ci_logs": ci_log,
    "edit": edit,
}
"""Tool name -> generator(rng, argument, step)."""


def tool_output(tool: str, argument: str, *, agent: str, step: int) -> str:
    """The output of `tool` on `argument` for `agent` at `step`, the same on every run.

    :raises KeyError: for a tool the corpus does not know.
    """
    return TOOLS[tool](random.Random(f"{agent}/{step}/{tool}/{argument}"), argument, step)
