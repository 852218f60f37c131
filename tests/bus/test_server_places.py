"""Where the embedded server may live: its store dir and its address."""

from __future__ import annotations

from pathlib import Path

import pytest

from ctxbus.bus import BusConfig, ServerError, connect
from ctxbus.bus.testing import ServerFactory


def test_a_store_dir_that_is_a_file_is_a_server_error(nats_server_factory: ServerFactory, tmp_path: Path) -> None:
    taken = tmp_path / "a-file"
    taken.write_text("not a directory")
    with pytest.raises(ServerError, match=f"cannot use {taken} as the NATS store"):
        nats_server_factory(data_dir=taken)
    with pytest.raises(ServerError, match="cannot use .* as the NATS store"):
        nats_server_factory(data_dir=taken / "below")


async def test_a_server_listens_on_an_ipv6_address(nats_server_factory: ServerFactory) -> None:
    server = nats_server_factory(host="::1")
    assert server.url == f"nats://[::1]:{server.port}"
    client = await connect(BusConfig(servers=[server.url]))
    try:
        assert client.is_connected
    finally:
        await client.close()
