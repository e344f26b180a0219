"""A small, bounded HTTP server for one Prometheus registry (``--metrics-address``),
shared by the daemon (``stream/metrics``) and ``serve`` (``replay/serve/metrics``).

``serve_registry(registry, "HOST:PORT")`` starts one (``parse_address`` reads the
address); ``MetricsServer(registry, (host, port)).start()`` serves ``generate_latest(registry)``
at ``/`` and ``/metrics`` from one asyncio event-loop thread of its own, so that a bad
scraper can cost the process no more than a fixed number of descriptors and never
stop the backup (issue 25: prometheus_client's threading server kept a thread and a
descriptor per idle connection, for ever, until the archiver got EMFILE):

- at most ``max_connections`` connections at once; one more is answered ``503`` and
  closed at once (its descriptor lives for the few turns of the loop from its accept);
- ``request_timeout`` seconds from accept to the end of the request head, which may
  hold ``max_request_bytes`` at most (beyond: ``431``); a slow or idle client is cut off;
- ``write_timeout`` seconds from the response to the close: the response is followed by
  a FIN (``Connection: close``, never keep-alive), what the client still sends is
  discarded until it closes, and a client that neither reads nor closes is cut off;
- only GET and HEAD (others ``405``) of ``/`` and ``/metrics`` (others ``404``);
- asyncio's accept loop takes ``ACCEPT_BATCH`` connections a turn and a connection
  takes three or four turns from its accept to ``connection_made`` (and, refused, to its
  close), so the server holds at most about ``max_connections + 4 * ACCEPT_BATCH``
  descriptors (measured: 44 with 300 idle clients, 32 in a burst of 200 connects).
  When the process runs out of descriptors anyway (EMFILE/ENFILE/ENOBUFS/ENOMEM at
  accept), that accept loop logs it and tries again a second later
  (``BaseSelectorEventLoop._accept_connection``, read in CPython 3.11); this module logs
  asyncio's complaints in one line, without a traceback.

Refused, timed-out and bad requests are counted in the registry when ``counters`` names
a prefix (``mysqlbackup_metrics_http``: ``..._refused_total`` and so on). ``close()``
stops the loop and joins its thread. The server takes any registry and address, so
another listener of the process can serve a registry of its own the same way.
"""

import asyncio
import dataclasses
import errno
import logging
import re
import socket
import threading

from mysqlbackup.errors import UsageError

log = logging.getLogger(__name__)

# the daemon's prefix for the HTTP server's own counters: mysqlbackup_metrics_http_refused_total,
# ..._timeouts_total, ..._bad_requests_total (``serve`` passes a prefix of its own)
HTTP_COUNTERS = "mysqlbackup_metrics_http"

ACCEPT_BATCH = 4    # connections accepted per turn of the loop (asyncio: the listen backlog)
HEAD_END = re.compile(rb"\r?\n\r?\n")
PATHS = (b"/", b"/metrics")
REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
           431: "Request Header Fields Too Large", 500: "Internal Server Error",
           503: "Service Unavailable"}


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one client may take of the server."""

    max_connections: int = 32        # open at once; more are answered 503 and closed
    request_timeout: float = 5.0     # from accept to the end of the request head
    write_timeout: float = 5.0       # from the response to the close
    max_request_bytes: int = 8192    # request line and headers
    backlog: int = socket.SOMAXCONN  # of the listening socket (the kernel caps it)


def response(status, body=b"", content_type="text/plain; charset=utf-8", head=False,
             headers=()):
    """The bytes of one HTTP/1.1 response that closes its connection."""
    lines = [f"HTTP/1.1 {status} {REASONS[status]}", f"Content-Type: {content_type}",
             f"Content-Length: {len(body)}", "Connection: close", *headers, "", ""]
    return "\r\n".join(lines).encode("latin-1") + (b"" if head else body)


def error(status, why, headers=()):
    """A short plain-text error response."""
    return response(status, f"{status} {REASONS[status]}: {why}\n".encode(), headers=headers)


REFUSED = error(503, "too many connections")


class MetricsServer:
    """``registry`` served over HTTP at ``address`` (host, port) by an event-loop thread."""

    def __init__(self, registry, address, limits=Limits(), counters=None):
        self.registry = registry
        self.address = address
        self.limits = limits
        self.loop = self.thread = self.server = None
        self.port = None
        self.connections = set()    # the _Connection of every open, admitted connection
        self.counters = _counters(registry, counters) if counters else None

    def start(self):
        """Bind, listen and serve; an OSError (port in use, unknown host) when it cannot."""
        sock = bind(*self.address, self.limits.backlog)
        self.port = sock.getsockname()[1]
        self.loop = asyncio.new_event_loop()
        self.loop.set_exception_handler(_log_loop_error)
        self.thread = threading.Thread(target=_run, args=(self.loop,), name="metrics-http",
                                       daemon=True)
        self.thread.start()
        try:
            asyncio.run_coroutine_threadsafe(self._listen(sock), self.loop).result(10)
        except BaseException:
            sock.close()
            self.close()
            raise
        return self

    async def _listen(self, sock):
        # asyncio listens with the backlog it is given and accepts up to as many
        # connections per turn: a small batch bounds the descriptors held between two
        # turns, and listening again with the full backlog lets the kernel queue a burst
        self.server = await self.loop.create_server(lambda: _Connection(self), sock=sock,
                                                    backlog=ACCEPT_BATCH)
        sock.listen(self.limits.backlog)

    def close(self):
        """Stop serving: close the listener and every connection, stop the loop, join."""
        loop, thread, self.loop = self.loop, self.thread, None
        if loop is None:
            return
        if thread.is_alive():
            try:
                asyncio.run_coroutine_threadsafe(self._shutdown(), loop).result(5)
            finally:
                loop.call_soon_threadsafe(loop.stop)
                thread.join(5)

    async def _shutdown(self):
        if self.server is not None:
            self.server.close()
        for connection in list(self.connections):
            connection.transport.abort()
        await asyncio.sleep(0)  # their connection_lost runs

    def count(self, what):
        """One more refused / timeouts / bad_requests (when counted)."""
        if self.counters is not None:
            self.counters[what].inc()

    def answer(self, head):
        """The response to a whole request head (bytes, without its blank line)."""
        parts = head.split(b"\n", 1)[0].rstrip(b"\r").split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1."):
            self.count("bad_requests")
            return error(400, "not an HTTP/1.x request line")
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target not in PATHS:
            self.count("bad_requests")
            return error(404, "try /metrics")
        if method not in (b"GET", b"HEAD"):
            self.count("bad_requests")
            return error(405, "GET or HEAD only", headers=("Allow: GET, HEAD",))
        from prometheus_client.exposition import (
            CONTENT_TYPE_PLAIN_0_0_4,
            generate_latest,
        )
        try:
            body = generate_latest(self.registry)
        except Exception as e:  # noqa: BLE001 (a collector's bug: one line, serving goes on)
            log.warning("metrics: cannot collect: %s: %s", type(e).__name__, e)
            return error(500, "cannot collect the metrics")
        return response(200, body, CONTENT_TYPE_PLAIN_0_0_4, head=method == b"HEAD")


class _Connection(asyncio.Protocol):
    """One client: read the request head under its deadline, answer, drain, close."""

    def __init__(self, server):
        self.server = server
        self.transport = self.timer = None
        self.head = bytearray()
        self.answered = False

    def connection_made(self, transport):
        self.transport = transport
        server = self.server
        if len(server.connections) >= server.limits.max_connections:
            server.count("refused")
            transport.write(REFUSED)  # fits an empty socket buffer: sent at once
            transport.abort()
            return
        server.connections.add(self)
        self._deadline(server.limits.request_timeout)

    def data_received(self, data):
        if self.answered:
            return  # what follows the request is discarded until the client closes
        start = max(0, len(self.head) - 3)
        self.head += data
        end = HEAD_END.search(self.head, start)
        limit = self.server.limits.max_request_bytes
        if end is not None and end.end() <= limit:
            self._answer(self.server.answer(bytes(self.head[:end.start()])))
        elif len(self.head) > limit:
            self.server.count("bad_requests")
            self._answer(error(431, f"a request head is {limit} bytes at most"))

    def eof_received(self):
        return False  # the client is done (or gave up): close once the response is out

    def connection_lost(self, exc):
        if self.timer is not None:
            self.timer.cancel()
        self.server.connections.discard(self)

    def _answer(self, data):
        self.answered, self.head = True, None
        self.transport.write(data)
        self.transport.write_eof()  # FIN once written; the client's close ends it
        self._deadline(self.server.limits.write_timeout)

    def _deadline(self, seconds):
        if self.timer is not None:
            self.timer.cancel()
        self.timer = asyncio.get_running_loop().call_later(seconds, self._expired)

    def _expired(self):
        self.server.count("timeouts")
        self.transport.abort()


def _run(loop):
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


def bind(host, port, backlog):
    """A listening TCP socket on ``host`` (its first address family) and ``port``."""
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM,
                                flags=socket.AI_PASSIVE)[0][0]
    # '::' takes IPv4 scrapes too, as prometheus_client's server did (no IPV6_V6ONLY)
    dualstack = family == socket.AF_INET6 and host == "::" and socket.has_dualstack_ipv6()
    return socket.create_server((host, port), family=family, backlog=backlog,
                                dualstack_ipv6=dualstack)


def _counters(registry, prefix):
    from prometheus_client import Counter
    helps = {"refused": "Connections answered 503 and closed: too many open at once",
             "timeouts": "Connections cut off: the request head or the response's "
                         "delivery took too long",
             "bad_requests": "Requests answered 400, 404, 405 or 431"}
    return {what: Counter(f"{prefix}_{what}", text, registry=registry)
            for what, text in helps.items()}


def _log_loop_error(loop, context):
    """asyncio's complaints (e.g. 'socket.accept() out of system resource') in one line."""
    exc = context.get("exception")
    log.warning("metrics server: %s%s", context.get("message", "error"),
                f": {type(exc).__name__}: {exc}" if exc is not None else "")


def serve_registry(registry, address, counters=HTTP_COUNTERS):
    """``registry`` served at ``http://HOST:PORT/`` by a started ``MetricsServer``
    (its own counters under the ``counters`` prefix); a port in use (or an address not
    of this host) is a UsageError: one line, exit 2."""
    host, port = parse_address(address)
    server = MetricsServer(registry, (host, port), counters=counters)
    try:
        server.start()
    except OSError as e:
        why = "address already in use" if e.errno == errno.EADDRINUSE else e.strerror or e
        raise UsageError(f"cannot serve metrics on {address}: {why}") from None
    log.info("serving metrics at http://%s:%d/", host, server.port)
    return server


def parse_address(text):
    """'HOST:PORT' ('[::1]:9104' for IPv6; ':9104' for every address) -> (host, port)."""
    host, sep, port = (text or "").rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise UsageError(f"bad --metrics-address {text!r}: HOST:PORT, e.g. 127.0.0.1:9104")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    return host or "0.0.0.0", int(port)
