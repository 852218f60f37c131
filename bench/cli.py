"""How long the `ctxbus` command takes to answer, against a bare Python start.

    python bench/cli.py [--runs 21]

Starts `ctxbus up` on a free port (its store in a temp dir) and commits a few changes
to one brief, then times, round after round in turn: `python -c pass` (the baseline: an
interpreter that starts and exits), `ctxbus --version`, `ctxbus --help` and
`ctxbus brief show` against that server. Prints the median and p90 of each and its ratio
to the baseline. Targets (medians): `--version` and `--help` <= 0.3 s,
`brief show` <= 0.6 s. The commands run as users run them: the `ctxbus` script
installed next to this interpreter, output to a pipe.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import percentile  # noqa: E402

DOMAIN = "bench/cli/show"
TARGETS = {"ctxbus --version": 0.3, "ctxbus --help": 0.3, "ctxbus brief show": 0.6}
"""Median seconds each command should take at most."""


def _ctxbus() -> str:
    script = Path(sys.executable).parent / "ctxbus"
    if not script.is_file():
        sys.exit(f"no ctxbus script beside {sys.executable}: install ctxbus in this environment first")
    return str(script)


def _start_up(ctxbus: str, data_dir: Path, env: dict[str, str]) -> tuple[subprocess.Popen[str], str]:
    """`ctxbus up` on a free port; returns the process and its URL once it serves."""
    up = subprocess.Popen(
        [ctxbus, "up", "--port", "0", "--data-dir", str(data_dir)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert up.stdout is not None
    url = None
    for line in up.stdout:
        found = re.search(r"nats://[0-9.]+:\d+", line)
        url = url or (found.group(0) if found else None)
        if line.startswith("coordinator ") and url:
            return up, url
    up.kill()
    sys.exit("ctxbus up did not start: see its output above")


def _time(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, check=True)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=21, help="rounds; each times every command once")
    runs = parser.parse_args().runs
    ctxbus = _ctxbus()
    with tempfile.TemporaryDirectory(prefix="ctxbus-bench-cli-") as tmp:
        env = {**os.environ, "CTXBUS_STATE_DIR": tmp, "COLUMNS": "100"}
        up, url = _start_up(ctxbus, Path(tmp) / "nats", env)
        try:
            env["CTXBUS_NATS_URL"] = url
            for op, value in [("set_goal", "make the cache safe"), ("add_pending", "write the migration")]:
                subprocess.run(
                    [ctxbus, "brief", "propose", op, value, "-d", DOMAIN], env=env, check=True, capture_output=True
                )
            commands = {
                "python -c pass": [sys.executable, "-c", "pass"],
                "ctxbus --version": [ctxbus, "--version"],
                "ctxbus --help": [ctxbus, "--help"],
                "ctxbus brief show": [ctxbus, "brief", "show", "-d", DOMAIN],
            }
            for command in commands.values():  # warm the page cache and the bytecode
                _time(command, env)
            samples: dict[str, list[float]] = {name: [] for name in commands}
            names = list(commands)
            for round_ in range(runs):
                for name in names[round_ % len(names) :] + names[: round_ % len(names)]:  # rotate the order
                    samples[name].append(_time(commands[name], env))
        finally:
            up.terminate()
            up.wait(30)
    print(f"ctxbus CLI start-up, {runs} runs each, medians against `python -c pass` ({os.cpu_count()} CPUs)")
    baseline = statistics.median(samples["python -c pass"])
    for name, times in samples.items():
        median = statistics.median(times)
        target = TARGETS.get(name)
        verdict = "" if target is None else f"  (target <= {target:.1f} s: {'met' if median <= target else 'MISSED'})"
        print(
            f"  {name:<20} median {median * 1000:7.1f} ms   p90 {percentile(times, 90) * 1000:7.1f} ms"
            f"   {median / baseline:5.1f}x{verdict}"
        )


if __name__ == "__main__":
    main()
