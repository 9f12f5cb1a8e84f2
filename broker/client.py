"""A minimal Kafka protocol client: the follower's fetcher uses the async one,
tests, the fuzzer and tools use the blocking one.

Requests are kafka-python message objects; responses come back decoded.
"""

from __future__ import annotations

import asyncio
import socket
import struct

from broker.protocol import APIS


_INT32 = struct.Struct(">i")


def _frame(request, version: int, correlation_id: int, client_id: str) -> bytes:
    request.API_VERSION = version
    request.with_header(correlation_id=correlation_id, client_id=client_id)
    return bytes(request.encode(header=True, framed=True))


def _decode(request_cls_response, version: int, payload: bytes, flexible_header: bool):
    pos = 4
    if flexible_header:
        pos += 1  # empty tagged-field section
    return request_cls_response.decode(payload[pos:], version=version)


def _response_class(request):
    return APIS[request.API_KEY][1]


def _flexible_response_header(request, version: int) -> bool:
    return request.API_KEY != 18 and request.flexible_version_q(version)


class AsyncConnection:
    def __init__(self, host: str, port: int, client_id: str = "broker", timeout: float = 30.0):
        self.host, self.port, self.client_id, self.timeout = host, port, client_id, timeout
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.correlation_id = 0

    async def connect(self) -> None:
        self.reader, self.writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port), self.timeout)
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    async def request(self, request, version: int):
        self.correlation_id += 1
        corr = self.correlation_id
        self.writer.write(_frame(request, version, corr, self.client_id))
        await self.writer.drain()
        size = _INT32.unpack(await asyncio.wait_for(self.reader.readexactly(4), self.timeout))[0]
        payload = await asyncio.wait_for(self.reader.readexactly(size), self.timeout)
        got = _INT32.unpack_from(payload, 0)[0]
        if got != corr:
            raise ConnectionError(f"correlation id {got}, expected {corr}")
        return _decode(_response_class(request), version, payload, _flexible_response_header(request, version))

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


class SyncConnection:
    """Blocking connection for tests and tools."""

    def __init__(self, host: str, port: int, client_id: str = "test", timeout: float = 10.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.correlation_id = 0
        self.client_id = client_id

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                raise ConnectionError("connection closed by broker")
            buf += chunk
        return bytes(buf)

    def read_frame(self) -> bytes:
        size = _INT32.unpack(self._read_exact(4))[0]
        return self._read_exact(size)

    def request(self, request, version: int):
        self.correlation_id += 1
        corr = self.correlation_id
        self.send_raw(_frame(request, version, corr, self.client_id))
        if request.API_KEY == 0 and getattr(request, "acks", 1) == 0:
            return None
        payload = self.read_frame()
        got = _INT32.unpack_from(payload, 0)[0]
        if got != corr:
            raise ConnectionError(f"correlation id {got}, expected {corr}")
        return _decode(_response_class(request), version, payload, _flexible_response_header(request, version))

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
