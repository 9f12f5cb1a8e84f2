"""The network layer (Kafka's SocketServer): accepts connections, reads
length-prefixed frames, parses request headers, and answers strictly in
request order.

Per connection, requests are read as they come and each is handed to the
dispatcher as its own task (a produce appends before its first await, so
appends happen in request order); one writer task awaits them in order and
writes the responses.  At most MAX_IN_FLIGHT requests wait per connection,
so memory stays bounded.  A frame that cannot be parsed, an unknown API
key or an unsupported version closes the connection (ApiVersions answers
UNSUPPORTED_VERSION instead, as the protocol asks).  What a request means
is not this module's business: it only calls `dispatch`.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import struct
from typing import Awaitable, Callable

from broker import protocol as P

log = logging.getLogger("broker")

MAX_IN_FLIGHT = 32
_INT32 = struct.Struct(">i")

# dispatch(api_key, version, decoded request, client id) -> response object, or None for no response
Dispatch = Callable[[int, int, object, str], Awaitable[object]]


class SocketServer:
    def __init__(self, host: str, port: int, dispatch: Dispatch, max_request_bytes: int, idle_ms: int):
        self.host = host
        self.port = port
        self.dispatch = dispatch
        self.max_request_bytes = max_request_bytes
        self.idle_s = idle_ms / 1000.0
        self.connections: set[asyncio.StreamWriter] = set()
        self.server: asyncio.AbstractServer | None = None

    async def start(self) -> None:
        self.server = await asyncio.start_server(self._serve_connection, self.host, self.port,
                                                 reuse_address=True, backlog=256)

    def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for w in list(self.connections):
            w.close()

    async def _serve_connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        sock = writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        peer = writer.get_extra_info("peername")
        self.connections.add(writer)
        queue: asyncio.Queue = asyncio.Queue(maxsize=MAX_IN_FLIGHT)
        inflight: set[asyncio.Task] = set()
        writer_task = loop.create_task(self._write_responses(queue, writer, peer))
        idle = self.idle_s
        try:
            while True:
                head = await asyncio.wait_for(reader.readexactly(4), idle)
                size = _INT32.unpack(head)[0]
                if size < 8 or size > self.max_request_bytes:
                    log.debug("closing %s: request size %d out of bounds", peer, size)
                    break
                frame = await asyncio.wait_for(reader.readexactly(size), idle)
                try:
                    api_key, version, corr, client_id, pos = P.parse_request_header(frame)
                except P.BadRequest as e:
                    log.debug("closing %s: %s", peer, e)
                    break
                api = P.APIS.get(api_key)
                if api is None:
                    log.debug("closing %s: unknown api key %d", peer, api_key)
                    break
                req_cls, _, lo, hi = api
                if not lo <= version <= hi:
                    if api_key == P.API_VERSIONS:
                        fut = loop.create_future()
                        fut.set_result(P.api_versions_response(0, P.UNSUPPORTED_VERSION))
                        await queue.put((fut, api_key, 0, corr))
                        continue
                    log.debug("closing %s: api %d version %d not supported", peer, api_key, version)
                    break
                try:
                    req = req_cls.decode(memoryview(frame)[pos:], version=version)
                except Exception as e:
                    log.debug("closing %s: undecodable api %d v%d body: %s", peer, api_key, version, e)
                    break
                task = loop.create_task(self.dispatch(api_key, version, req, client_id or ""))
                inflight.add(task)
                task.add_done_callback(inflight.discard)
                await queue.put((task, api_key, version, corr))
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.TimeoutError, OSError):
            pass
        finally:
            # The client is gone or misbehaved: drop what it still waits for (as Kafka does).
            for task in list(inflight):
                task.cancel()
            writer_task.cancel()
            self.connections.discard(writer)
            writer.close()

    async def _write_responses(self, queue: asyncio.Queue, writer: asyncio.StreamWriter, peer) -> None:
        while True:
            item = await queue.get()
            if item is None:
                return
            fut, api_key, version, corr = item
            try:
                resp = await fut
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("error handling api %d v%d from %s; closing the connection", api_key, version, peer)
                writer.close()
                return
            if resp is None:
                continue  # acks=0 produce: no response
            if writer.is_closing():
                continue
            try:
                frame = P.encode_response(resp, api_key, version, corr)
            except Exception:
                log.exception("cannot encode the api %d v%d response to %s; closing the connection",
                              api_key, version, peer)
                writer.close()
                return
            try:
                writer.write(frame)
                await writer.drain()
            except (ConnectionError, OSError):
                writer.close()
