"""One agent process of `bench/brief.py`'s propagation figure; not for use on its own.

    python bench/_propagation_worker.py URL DOMAIN ENTRIES [CREDENTIALS]

Measures three things in the same process and prints them as JSON once it has seen
ENTRIES log entries: raw fan-out (publish time carried in the payload -> received
here), raw stored fan-out (a JetStream stream's store time -> its republished copy
received here) and the brief (the log's own store time of an entry -> applied here, on
the replica's path: `BriefLog.apply_trusted` called by `TxLog.tail`; with CREDENTIALS,
each entry's signature is checked first, as a replica with auth does). Prints "ready" when
subscribed to the raw subjects; the caller leaves it a moment to start following the log.
"""

from __future__ import annotations

import json
import struct
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import NoReturn

import anyio
from nats.aio.msg import Msg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxbus.bus import BriefLog, BusConfig, Credentials, LogEntry, Verb, Verifier, connect, run_async, subject  # noqa: E402
from ctxbus.schemas import Domain  # noqa: E402

RAW_SUBJECT = "rawb.fan"
STORED_SUBJECT = "rawb.stored"
STORED_LIVE = "rawb.live"
"""Where the raw stream republishes what it stores on `STORED_SUBJECT`."""
RAW_DONE = b"done"
DEADLINE = 300.0
"""Seconds after which the worker reports whatever it has measured."""


async def run(url: str, domain: Domain, entries: int, credentials: Credentials | None) -> None:
    client = await connect(BusConfig(servers=[url], credentials=credentials))
    raw: list[float] = []
    raw_done = anyio.Event()

    stored: list[float] = []
    stored_done = anyio.Event()

    async def on_raw(msg: Msg) -> None:
        if msg.data == RAW_DONE:
            raw_done.set()
            return
        (sent,) = struct.unpack_from("d", msg.data)
        raw.append(time.time() - sent)

    async def on_stored(msg: Msg) -> None:
        if msg.data == RAW_DONE:
            stored_done.set()
            return
        stored_at = datetime.fromisoformat((msg.headers or {})["Nats-Time-Stamp"]).timestamp()
        stored.append(time.time() - stored_at)

    verifier = Verifier(credentials.trusted_signers) if credentials is not None else None
    brief_log = BriefLog(client, verifier=verifier)
    applied: dict[int, float] = {}
    applied_all = anyio.Event()

    async def follow() -> NoReturn:
        state = await brief_log.load(domain)

        def on_entry(entry: LogEntry) -> None:
            nonlocal state
            state = brief_log.apply_trusted(state, entry)
            if entry.time is not None:  # None only if read back, not heard live
                applied[entry.seq] = time.time() - entry.time.timestamp()
            if len(applied) == entries:
                applied_all.set()

        await brief_log.txlog.tail(subject(domain, Verb.TX), state.seq, on_entry)

    await client.subscribe(RAW_SUBJECT, cb=on_raw)
    await client.subscribe(STORED_LIVE, cb=on_stored)
    await client.flush()
    with anyio.move_on_after(DEADLINE):  # report what arrived, rather than hang the bench
        async with anyio.create_task_group() as tg:
            tg.start_soon(follow)
            print("ready", flush=True)
            await raw_done.wait()
            await stored_done.wait()
            await applied_all.wait()
            tg.cancel_scope.cancel()
    print(json.dumps({"raw": raw, "stored": stored, "brief": applied}), flush=True)
    await client.close()


if __name__ == "__main__":
    credentials = Credentials.load(sys.argv[4]) if len(sys.argv) > 4 else None
    run_async(run, sys.argv[1], Domain.parse(sys.argv[2]), int(sys.argv[3]), credentials)
