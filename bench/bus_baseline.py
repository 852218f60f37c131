"""Bus overhead against raw NATS, measured in the same run on the embedded server.

    python bench/bus_baseline.py [--ops 2000]

Prints median and p99 for raw JetStream publish+ack, raw KV CAS, request/reply,
fan-out to 8 subscribers, and the same work through TxLog and Leases, then the
ratios ours/raw. Raw and ours alternate op by op, so drift hits both alike.
Targets: TxLog append <= 1.3x publish+ack; lease transition <= 1.3x KV CAS.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import anyio
from nats.js.api import KeyValueConfig, StreamConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _stats import ratio, summary  # noqa: E402

from ctxbus.bus import BusConfig, EmbeddedServer, Leases, TxLog, connect, run_async  # noqa: E402
from ctxbus.schemas import LeaseRecord  # noqa: E402


async def run(ops: int) -> None:
    async with EmbeddedServer() as server:
        nc = await connect(BusConfig(servers=[server.url]))
        js = nc.jetstream()
        await js.add_stream(StreamConfig(name="RAW", subjects=["raw.>"]))
        kv = await js.create_key_value(KeyValueConfig(bucket="raw_kv"))
        txlog = TxLog(nc)
        await txlog.ensure()
        leases = Leases(nc)
        await leases.ensure()
        print(f"nats-server at {server.url} (sync_interval: {server.sync_interval}), {ops} ops each")

        raw_pub: list[float] = []
        ours_append: list[float] = []
        ours_cas_append: list[float] = []
        raw_kv: list[float] = []
        ours_lease: list[float] = []
        payload = b"x" * 256
        rev = await kv.put("k", payload)
        lease = await leases.claim("bench.lease", "bench", ttl=3600)
        record = LeaseRecord(holder="bench", state="claimed")
        last = 0
        for i in range(ops):
            t0 = time.perf_counter()
            await js.publish("raw.a", payload, headers={"Nats-Msg-Id": f"r{i}"})
            t1 = time.perf_counter()
            await txlog.append("ctx.b.b.plain.tx", payload, f"o{i}")
            t2 = time.perf_counter()
            last = await txlog.append("ctx.b.b.cas.tx", payload, f"c{i}", expected_last_subject_seq=last)
            t3 = time.perf_counter()
            rev = await kv.update("k", payload, last=rev)
            t4 = time.perf_counter()
            lease = await leases.transition(lease.key, lease.revision, record)
            t5 = time.perf_counter()
            raw_pub.append(t1 - t0)
            ours_append.append(t2 - t1)
            ours_cas_append.append(t3 - t2)
            raw_kv.append(t4 - t3)
            ours_lease.append(t5 - t4)

        async def echo(msg):  # type: ignore[no-untyped-def]
            await msg.respond(msg.data)

        await nc.subscribe("bench.echo", cb=echo)
        rr: list[float] = []
        for _ in range(ops):
            t0 = time.perf_counter()
            await nc.request("bench.echo", payload, timeout=2)
            rr.append(time.perf_counter() - t0)

        fan: list[float] = []
        subscribers = [await connect(BusConfig(servers=[server.url])) for _ in range(8)]
        done = anyio.Event()
        seen = 0

        async def on_fan(_msg):  # type: ignore[no-untyped-def]
            nonlocal seen
            seen += 1
            if seen == 8:
                done.set()

        for sub in subscribers:
            await sub.subscribe("bench.fan", cb=on_fan)
            await sub.flush()
        for _ in range(ops):
            seen, done = 0, anyio.Event()
            t0 = time.perf_counter()
            await nc.publish("bench.fan", payload)
            await done.wait()
            fan.append(time.perf_counter() - t0)

        print("\nraw NATS baselines")
        pub_med, _ = summary("JetStream publish+ack", raw_pub)
        kv_med, _ = summary("KV CAS update", raw_kv)
        summary("request/reply round trip", rr)
        summary("fan-out to 8 subscribers", fan)
        print("\nthrough ctxbus")
        app_med, _ = summary("TxLog.append (msg id)", ours_append)
        cas_med, _ = summary("TxLog.append (msg id + CAS)", ours_cas_append)
        lease_med, _ = summary("Leases.transition (CAS)", ours_lease)
        print("\nratios, ours / raw (medians)")
        ratio("TxLog.append / publish+ack", app_med, pub_med, 1.3)
        ratio("TxLog.append+CAS / publish+ack", cas_med, pub_med, 1.3)
        ratio("Leases.transition / KV CAS", lease_med, kv_med, 1.3)
        for sub in subscribers:
            await sub.close()
        await nc.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ops", type=int, default=2000, help="operations per measurement (default: %(default)s)")
    args = parser.parse_args()
    run_async(run, args.ops)


if __name__ == "__main__":
    main()
