"""A loopback TCP proxy that adds a fixed latency per HTTP request, and counts traffic.

Put it between an S3 client and a local S3 server (moto, SeaweedFS) to make every request cost
what it costs against a remote object store, then compare clients by wall time, request count
and bytes moved.

What it does, precisely:

* Each accepted client connection gets its own upstream connection. Opening it waits
  ``connect_latency`` first (a TCP handshake costs one round trip).
* **One request = the first chunk the client sends after the server last sent something** (or
  the first chunk on a connection). That is exact for HTTP/1.1 without pipelining, which is how
  S3 clients (reqwest/hyper, botocore) talk: a client sends a whole request, then reads the whole
  response before reusing the connection. (A server's ``100 Continue`` would make a request count
  twice; S3 clients here do not ask for it.)
* That first chunk of each request is held for ``latency`` seconds before it is forwarded, so
  every request's time to first byte grows by one round trip. Later chunks of the same request
  body and all response bytes flow without delay, at whatever speed loopback and the server give:
  the proxy models latency, not bandwidth.
* For fault tests, ``drop_response(first_chunk) -> bool`` picks requests whose response is
  lost: the request reaches the server, but when the response starts the proxy resets both
  connections instead of relaying it (the client cannot tell whether the request took effect).
* Counted: requests, connections (total and most open at once), bytes client -> server (``up``,
  request headers and bodies) and server -> client (``down``, response headers and bodies), and
  the most requests that were waiting for their first response byte at the same time (how many
  requests a client really keeps in flight).

Run it standalone (``python benchmarks/latency_proxy.py --upstream 127.0.0.1:5000
--latency-ms 20``); it prints ``LISTEN <port> CONTROL <port>``. The control port answers one
line: ``stats`` (counters as JSON) or ``reset`` (counters as JSON, then zeroed).
:class:`ProxyProcess` runs it as a child process (so its CPU use does not compete for the
benchmark's GIL) and talks to the control port.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

CHUNK = 256 * 1024


@dataclass
class ProxyStats:
    """Traffic counters of one proxy."""

    requests: int = 0
    connections: int = 0
    open_connections: int = 0
    max_open_connections: int = 0
    waiting: int = 0
    max_waiting: int = 0
    bytes_up: int = 0
    bytes_down: int = 0
    dropped: int = 0
    #: Requests by kind (:func:`request_kind`).
    kinds: dict[str, int] = field(default_factory=dict)


def request_kind(first_chunk: bytes) -> str:
    """What a request is, from its first bytes: the DynamoDB operation (``ddb:GetItem``), or
    the HTTP method with ``LIST`` for S3 listings and ``PUT-IF-NONE-MATCH`` for conditional
    creates."""
    head = first_chunk.split(b"\r\n\r\n", 1)[0].decode("latin-1")
    lines = head.split("\r\n")
    method, _, rest = lines[0].partition(" ")
    target = rest.rsplit(" ", 1)[0]
    headers = {k.strip().lower(): v.strip() for k, _, v in
               (line.partition(":") for line in lines[1:])}
    if "x-amz-target" in headers:
        return "ddb:" + headers["x-amz-target"].rsplit(".", 1)[-1]
    if method == "GET" and ("list-type=" in target or "delimiter=" in target
                            or target.rstrip("/").count("/") <= 1):
        return "LIST"
    if method == "PUT" and headers.get("if-none-match") == "*":
        return "PUT-IF-NONE-MATCH"
    if method == "PUT" and ("partNumber=" in target):
        return "PUT-PART"
    if method == "POST" and "uploads" in target:
        return "POST-MULTIPART"
    return method


class LatencyProxy:
    """The proxy itself, on the running event loop (see the module doc for its behaviour)."""

    def __init__(self, upstream: tuple[str, int], latency: float, *,
                 connect_latency: float | None = None, host: str = "127.0.0.1",
                 port: int = 0, drop_response: Callable[[bytes], bool] | None = None,
                 ) -> None:
        self.upstream = upstream
        self.latency = latency
        self.connect_latency = latency if connect_latency is None else connect_latency
        self.host, self.port = host, port
        self.stats = ProxyStats()
        self.drop_response = drop_response
        self._server: asyncio.Server | None = None
        self._handlers: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        """Start listening (``self.port`` is then the bound port)."""
        self._server = await asyncio.start_server(self._handle, self.host, self.port)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        """Stop listening and close every proxied connection."""
        if self._server is not None:
            self._server.close()
        handlers = list(self._handlers)
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)

    def reset(self) -> ProxyStats:
        """Zero the counters (keeping the live gauges) and return the old ones."""
        old = self.stats
        self.stats = ProxyStats(open_connections=old.open_connections, waiting=old.waiting)
        return old

    async def _handle(self, client_r: asyncio.StreamReader,
                      client_w: asyncio.StreamWriter) -> None:
        me = asyncio.current_task()
        if me is not None:
            self._handlers.add(me)
            me.add_done_callback(self._handlers.discard)
        st = self.stats
        st.connections += 1
        st.open_connections += 1
        st.max_open_connections = max(st.max_open_connections, st.open_connections)
        waiting = False
        new_request = True
        drop = False
        try:
            await asyncio.sleep(self.connect_latency)
            up_r, up_w = await asyncio.open_connection(*self.upstream)
        except OSError:
            self.stats.open_connections -= 1
            client_w.close()
            return

        async def client_to_server() -> None:
            nonlocal waiting, new_request, drop
            while data := await client_r.read(CHUNK):
                if new_request:
                    new_request = False
                    drop = self.drop_response is not None and self.drop_response(data)
                    self.stats.requests += 1
                    kind = request_kind(data)
                    self.stats.kinds[kind] = self.stats.kinds.get(kind, 0) + 1
                    if not waiting:
                        waiting = True
                        self.stats.waiting += 1
                        self.stats.max_waiting = max(self.stats.max_waiting, self.stats.waiting)
                    await asyncio.sleep(self.latency)
                self.stats.bytes_up += len(data)
                up_w.write(data)
                await up_w.drain()
            if up_w.can_write_eof():
                up_w.write_eof()

        async def server_to_client() -> None:
            nonlocal waiting, new_request
            while data := await up_r.read(CHUNK):
                if drop:
                    self.stats.dropped += 1
                    client_w.transport.abort()
                    up_w.transport.abort()
                    return
                if waiting:
                    waiting = False
                    self.stats.waiting -= 1
                new_request = True
                self.stats.bytes_down += len(data)
                client_w.write(data)
                await client_w.drain()
            client_w.close()

        tasks = [asyncio.ensure_future(client_to_server()),
                 asyncio.ensure_future(server_to_client())]
        try:
            await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for t in tasks:
                t.cancel()
            if waiting:
                self.stats.waiting -= 1
            self.stats.open_connections -= 1
            for w in (client_w, up_w):
                with contextlib.suppress(Exception):
                    w.close()


async def _serve(args: argparse.Namespace) -> None:
    host, port = args.upstream.rsplit(":", 1)
    proxy = LatencyProxy((host, int(port)), args.latency_ms / 1000,
                         connect_latency=(None if args.connect_latency_ms is None
                                          else args.connect_latency_ms / 1000))
    await proxy.start()

    async def control(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
        line = (await r.readline()).decode().strip()
        stats = proxy.reset() if line == "reset" else proxy.stats
        w.write((json.dumps(asdict(stats)) + "\n").encode())
        await w.drain()
        w.close()

    ctl = await asyncio.start_server(control, "127.0.0.1", 0)
    print(f"LISTEN {proxy.port} CONTROL {ctl.sockets[0].getsockname()[1]}", flush=True)
    await asyncio.Event().wait()


class ProxyProcess:
    """A :class:`LatencyProxy` in a child process, with its counters over the control port.

    Use as a context manager; ``endpoint`` is ``http://127.0.0.1:<port>``.
    """

    def __init__(self, upstream: str, latency_ms: float,
                 connect_latency_ms: float | None = None) -> None:
        cmd = [sys.executable, __file__, "--upstream", upstream, "--latency-ms", str(latency_ms)]
        if connect_latency_ms is not None:
            cmd += ["--connect-latency-ms", str(connect_latency_ms)]
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        assert self._proc.stdout is not None
        words = self._proc.stdout.readline().split()
        if len(words) != 4:
            self._proc.kill()
            raise RuntimeError("latency proxy did not start")
        self.port, self._control = int(words[1]), int(words[3])
        self.endpoint = f"http://127.0.0.1:{self.port}"

    def _ask(self, what: str) -> dict[str, Any]:
        with socket.create_connection(("127.0.0.1", self._control), timeout=10) as s:
            s.sendall(what.encode() + b"\n")
            data = b""
            while chunk := s.recv(65536):
                data += chunk
        return json.loads(data)  # type: ignore[no-any-return]

    def stats(self) -> dict[str, Any]:
        """Counters since the last reset."""
        return self._ask("stats")

    def reset(self) -> dict[str, Any]:
        """Counters since the last reset; then start counting from zero."""
        return self._ask("reset")

    def close(self) -> None:
        """Stop the proxy process."""
        self._proc.terminate()
        try:
            self._proc.wait(5)
        except subprocess.TimeoutExpired:
            self._proc.kill()

    def __enter__(self) -> ProxyProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main() -> None:
    """Command line entry point."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--upstream", required=True, help="host:port of the S3 server")
    p.add_argument("--latency-ms", type=float, default=20.0)
    p.add_argument("--connect-latency-ms", type=float, default=None,
                   help="delay before opening each upstream connection (default: latency)")
    args = p.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args))


if __name__ == "__main__":
    main()
