"""The other end of `bench/brief.py`'s raw request/reply figure; not for use on its own.

    python bench/_echo_worker.py URL SUBJECT

Answers every request on SUBJECT with its own payload, from a process of its own, as a
coordinator answers a proposal. Prints "ready" once subscribed; runs until terminated.
"""

from __future__ import annotations

import sys
from pathlib import Path

import anyio
from nats.aio.msg import Msg

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ctxbus.bus import BusConfig, connect, run_async  # noqa: E402


async def run(url: str, subject: str) -> None:
    client = await connect(BusConfig(servers=[url]))

    async def echo(msg: Msg) -> None:
        await client.publish(msg.reply, msg.data)

    await client.subscribe(subject, cb=echo)
    await client.flush()
    print("ready", flush=True)
    await anyio.sleep_forever()


if __name__ == "__main__":
    run_async(run, sys.argv[1], sys.argv[2])
