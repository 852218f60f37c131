"""How long `ctxbus hook claude-code` takes to answer each Claude Code hook event.

    python bench/hooks.py [--session NAME] [--prompts 20] [--tools 60] [--nats URL] [--against DIR]
    python bench/hooks.py --rules

Replays a real Claude Code session of the anchors (`../shared/anchors/transcripts/
claude-code`) as Claude Code would run it with the hooks installed: its transcript
written in Claude Code's format, and for each event the real command, installed beside
this interpreter, started with the event on stdin (as Claude Code starts it). Events:
SessionStart (startup), UserPromptSubmit for the first `--prompts` prompts, PostToolUse
for the first `--tools` tool results, then PreCompact and SessionStart (compact)
several times. Prints the median and p95 per event and their ratio to a bare Python
start (`python -c pass`) and to `ctxbus --version`, timed in the same run, in turn.
With `--nats URL` the brief is read from that server (a `ctxbus up`): the hooks' extra
cost of the bus. With `--against DIR` (another ctxbus tree: a checkout, or
`git archive REV ctxbus | tar -x -C DIR`), every event is also answered by that code,
from a state of its own, in turn with this one (which goes first alternates), and each
event's row gains the ratio of this code's median to that code's.

`--rules` instead replays each session that was compacted while it was recorded up to
that moment, and compares the rules ctxbus pinned with Claude Code's own summary,
which the session holds: how many the summary kept verbatim, and how many the hooks'
SessionStart put back.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import percentile  # noqa: E402

from tests.hooks._claude import CONTINUED, ClaudeSession, check_output, claude_sessions, context_of  # noqa: E402

AGAINST = " [against]"
"""What the rows of the `--against` tree are named by: the event's name and this."""


def _timed(argv: list[str], stdin: bytes, env: dict[str, str]) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, input=stdin, capture_output=True, env=env, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(f"{argv} failed: {done.stderr.decode()}")
    return elapsed, done.stdout.decode()


def rules_at_compactions() -> None:
    """At each real compaction of the anchor sessions: the rules ctxbus pinned before it,
    how many Claude Code's own summary (recorded in the session) holds verbatim (their
    first 80 characters), and how many the hooks' SessionStart puts back."""
    from ctxbus.agents.hooks import hook_agent, hook_domain, hooks_store, run_claude_code
    from ctxbus.agents.runtime import inspect_store

    print("rules at the sessions' own compactions (Claude Code's summary, as recorded, against the hooks)")
    print(f"  {'session':<34} {'prompts':>7} {'pinned':>6} {'in summary':>10} {'hooks':>5}")
    for anchor in claude_sessions():
        rows = [json.loads(line) for line in anchor.read_text(encoding="utf-8").splitlines() if line.strip()]
        at = next((i for i, r in enumerate(rows) if r["role"] == "user" and r["content"].startswith(CONTINUED)), None)
        if not at:
            continue
        with tempfile.TemporaryDirectory(prefix="ctxbus-bench-rules-") as tmp:
            state = Path(tmp) / "state"
            session = ClaudeSession(anchor, Path(tmp) / "t.jsonl", Path(tmp))
            restored = ""
            for payload in session.events(limit=at + 1):
                out = run_claude_code(
                    json.dumps(payload).encode(),
                    env={"CTXBUS_STATE_DIR": str(state)},
                    store_of=lambda domain, agent, state=state: state.joinpath("agents", *domain.tokens, f"{agent}.db"),
                    bus=lambda: None,
                )
                if payload.get("source") == "compact":
                    restored = context_of(check_output("SessionStart", out))
                    break
            domain = hook_domain({}, str(session.cwd))
            store = hooks_store(state.joinpath("agents", *domain.tokens, f"{hook_agent({}, session.session_id)}.db"))
            pinned = next(view for view in inspect_store(store, domain) if view.name == "pinned")
            rules = [item.text for item in pinned.items if item.kind != "opening"]  # as `ctxbus inspect` shows them
            summary = rows[at]["content"]
            kept = sum(1 for rule in rules if rule.split(" ", 1)[-1][:80] in summary)
            back = sum(1 for rule in rules if rule in restored)
            print(f"  {anchor.name:<34} {len(session.prompts):>7} {len(rules):>6} {kept:>10} {back:>5}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--session", default="bookminder__day-002__s0.jsonl")
    parser.add_argument("--prompts", type=int, default=20)
    parser.add_argument("--tools", type=int, default=60)
    parser.add_argument("--compactions", type=int, default=10)
    parser.add_argument("--nats", default="")
    parser.add_argument("--rules", action="store_true", help="Only the rules at the sessions' own compactions.")
    parser.add_argument("--against", type=Path, help="Another ctxbus tree to time, event by event, with this one.")
    args = parser.parse_args()
    if args.rules:
        rules_at_compactions()
        return
    ctxbus = Path(sys.executable).parent / "ctxbus"
    anchor = next(path for path in claude_sessions() if path.name == args.session)
    samples: dict[str, list[float]] = defaultdict(list)
    with tempfile.TemporaryDirectory(prefix="ctxbus-bench-hooks-") as tmp:
        env = {**os.environ, "CTXBUS_STATE_DIR": str(Path(tmp) / "state")}
        env.pop("CTXBUS_NATS_URL", None)
        if args.nats:
            env.update(CTXBUS_NATS_URL=args.nats, CTXBUS_DOMAIN="bench/hooks/claude-code", CTXBUS_AGENT="claude-1")
        session = ClaudeSession(anchor, Path(tmp) / "transcript.jsonl", Path(tmp))
        counts = {"UserPromptSubmit": args.prompts, "PostToolUse": args.tools}

        commands = {"": ([str(ctxbus), "hook", "claude-code"], env)}
        if args.against:  # as the console script runs it, from the other tree
            script = "import sys; from ctxbus.coordinator.cli import main; sys.exit(main())"
            state = str(Path(tmp) / "against")
            against_env = {**env, "PYTHONPATH": str(args.against.resolve()), "CTXBUS_STATE_DIR": state}
            # -P: not the working directory first on the path, which may hold this tree's ctxbus
            commands[AGAINST] = ([sys.executable, "-P", "-c", script, "hook", "claude-code"], against_env)

        def run(payload: dict[str, object]) -> None:
            event = str(payload["hook_event_name"])
            key = f"{event} ({payload['source']})" if event == "SessionStart" else event
            turn = list(commands.items())
            if len(samples[key]) % 2:
                turn.reverse()
            for label, (argv, variables) in turn:
                elapsed, out = _timed(argv, json.dumps(payload).encode(), variables)
                check_output(event, out)
                samples[key + label].append(elapsed)
            # the baselines, in turn with the hooks so that load hits both alike
            samples["python -c pass"].append(_timed([sys.executable, "-c", "pass"], b"", env)[0])
            if len(samples["python -c pass"]) % 4 == 0:
                samples["ctxbus --version"].append(_timed([str(ctxbus), "--version"], b"", env)[0])

        for payload in session.events():
            event = str(payload["hook_event_name"])
            if event in counts:
                if counts[event] <= 0:
                    if all(n <= 0 for n in counts.values()):
                        break
                    continue
                counts[event] -= 1
            if event in ("PreCompact",) or payload.get("source") == "compact":
                continue  # timed below, after the session has grown
            run(payload)
        for _ in range(args.compactions):
            for payload in session.compact():
                run(payload)
        base = statistics.median(samples["python -c pass"])
        version = statistics.median(samples["ctxbus --version"])
        print(f"ctxbus hook claude-code, {anchor.name}, {'NATS ' + args.nats if args.nats else 'no NATS'}")
        if args.against:
            print(f"  against: {args.against} (rows{AGAINST}); /against: this code's median over that code's")
        print(f"  {'event':<36} {'n':>4} {'median':>9} {'p95':>9} {'/python':>8} {'/--version':>10} {'/against':>9}")
        for name, values in sorted(samples.items()):
            median = statistics.median(values)
            theirs = samples.get(name + AGAINST)
            ratio = f"{median / statistics.median(theirs):8.2f}x" if theirs else ""
            print(
                f"  {name:<36} {len(values):>4} {median * 1000:7.0f}ms {percentile(values, 95) * 1000:7.0f}ms"
                f" {median / base:7.1f}x {median / version:9.2f}x {ratio:>9}"
            )


if __name__ == "__main__":
    main()
