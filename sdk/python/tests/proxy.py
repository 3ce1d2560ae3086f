"""A TCP proxy in front of one member's HTTP port that can cut connections
mid-request: while `cutting`, each connection is closed as soon as the
member's answer starts, so the request arrived and was acted on but its
answer never reaches the client."""

from __future__ import annotations

import asyncio
from typing import Optional


class CuttingProxy:
    def __init__(self, upstream: str) -> None:
        host, _, port = upstream.rpartition(":")
        self._upstream = (host, int(port))
        self.cutting = False
        self.cut = 0
        self._server: Optional[asyncio.base_events.Server] = None

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        return f"127.0.0.1:{port}"

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self._upstream)

        async def forward_requests() -> None:
            while chunk := await reader.read(65536):
                up_writer.write(chunk)
                await up_writer.drain()

        requests = asyncio.ensure_future(forward_requests())
        try:
            while chunk := await up_reader.read(65536):
                if self.cutting:
                    self.cut += 1
                    break
                writer.write(chunk)
                await writer.drain()
        except ConnectionError:
            pass
        finally:
            requests.cancel()
            for stream in (writer, up_writer):
                stream.close()
