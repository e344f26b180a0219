"""The listening socket of ``mysqlbackup serve`` and its accept loop (one thread).

The accept loop never ends but on ``stop()``: out of descriptors, memory or buffers
it logs, backs off and tries again. Each accepted connection is admitted into the
``Registry`` and served by a thread of its own, within the bounds: at most
MAX_HANDSHAKES not logged in, MAX_HANDSHAKES_PER_ADDRESS of one address (a new one
ends its address's oldest, or the busiest address's: a flood of idle or slow clients
cannot keep a replica out); past ``max_connections`` logged in and MAX_HANDSHAKES
logging in, a connection gets 1040 "Too many connections" at once, as mariadbd
answers.
"""

import errno
import logging
import socket
import threading
from collections import Counter

from mysqlbackup.errors import UsageError
from replay.serve.protocol import packets as pk
from replay.serve.protocol.limits import MAX_HANDSHAKES, MAX_HANDSHAKES_PER_ADDRESS

# accept() failures that a full process or system causes: wait, then accept again
RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
MAX_BACKOFF = 1.0


class Listener:
    """The socket listening at ``address`` (bound at once: UsageError when it cannot
    be), and after ``start()`` the thread accepting on it; each connection is
    ``make(sock, peer, conn_id)`` (its ``thread`` started here), registered in
    ``registry``."""

    def __init__(self, address, registry, make, max_connections):
        self.registry, self.make, self.max_connections = registry, make, max_connections
        self.sock = _listen(address)
        self.stopping, self.thread = False, None
        self.wake = threading.Event()   # set by stop(): ends a back-off at once

    @property
    def address(self):
        """(host, port) listened at (the port picked when 0 was asked)."""
        return self.sock.getsockname()[:2]

    def start(self):
        """Accept in a thread of its own until ``stop()``."""
        self.thread = threading.Thread(target=self._accept, name="serve-accept", daemon=True)
        self.thread.start()

    def stop(self):
        """Stop accepting: the socket shut down and closed, a back-off ended."""
        self.stopping = True
        self.wake.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def join(self, timeout=5):
        """Wait for the accept thread (after ``stop()``)."""
        if self.thread is not None:
            self.thread.join(timeout=timeout)

    def _accept(self):
        backoff = 0.0
        while not self.stopping:
            try:
                sock, peer = self.sock.accept()
            except OSError as e:
                if self.stopping or e.errno == errno.EBADF:
                    return  # the listener was closed: stop()
                backoff = self._accept_failed(e, backoff)
                continue
            backoff = 0.0
            self._admit(sock, peer)

    def _accept_failed(self, error, backoff):
        """Log (at most once every few seconds) and wait a growing while when the process
        or the system is out of descriptors, memory or buffers; the next back-off."""
        self.registry.count("accept_errors")
        if error.errno not in RESOURCE_ERRNOS:  # e.g. ECONNABORTED: that client is gone
            return 0.0
        backoff = min(MAX_BACKOFF, backoff * 2 or 0.01)
        self.registry.note("accept", logging.WARNING, "cannot accept connections: %s; "
                           "accepting again in %.2f s", error.strerror or error, backoff)
        self.wake.wait(backoff)
        return backoff

    def _admit(self, sock, peer):
        """Serve a new connection in a thread of its own, or refuse it with 1040 when the
        server is full; a full set of handshakes ends its oldest."""
        admission = self.registry.admit(
            lambda conn_id: self.make(sock, peer, conn_id),
            self.max_connections + MAX_HANDSHAKES,
            lambda handshakes: _evict_for(handshakes, peer[0]))
        if admission.closed:
            sock.close()
            return
        conn, evicted = admission.conn, admission.evicted
        if conn is None:
            return self._refuse_now(sock, peer)
        if evicted is not None:
            self.registry.count("evicted")
            self.registry.note("evicted", logging.WARNING, "too many connections logging "
                               "in: %d from %s is closed for a new one (at most %d at once, "
                               "%d an address)", evicted.id, evicted.peer[0], MAX_HANDSHAKES,
                               MAX_HANDSHAKES_PER_ADDRESS)
            evicted.close()
        try:
            conn.thread.start()
        except RuntimeError as e:  # no thread can be started now
            self.registry.note("thread", logging.WARNING, "cannot serve a connection: %s", e)
            sock.close()
            self.registry.forget(conn)

    def _refuse_now(self, sock, peer):
        """1040 "Too many connections" as the first packet, as mariadbd sends it, then
        close; never waits on the peer."""
        self.registry.count("refused_connections")
        self.registry.note("full", logging.WARNING, "refused a connection from %s: %d "
                           "connections open (--max-connections %d and %d logging in)",
                           peer[0], self.max_connections + MAX_HANDSHAKES,
                           self.max_connections, MAX_HANDSHAKES)
        try:
            sock.setblocking(False)
            sock.send(pk.frames(pk.err_packet(pk.ER_CON_COUNT_ERROR, "Too many connections",
                                              before_handshake=True), 0)[0])
        except OSError:
            pass
        sock.close()


def _evict_for(handshakes, address):
    """The handshake to end for a new one from ``address`` (``handshakes``: those
    logging in, oldest first), or None: its own oldest when it holds its share already,
    else, when all are taken, the oldest of the address holding the most (one address
    cannot push others out)."""
    mine = [c for c in handshakes if c.peer[0] == address]
    if len(mine) >= MAX_HANDSHAKES_PER_ADDRESS:
        return mine[0]
    if len(handshakes) >= MAX_HANDSHAKES:
        held = Counter(c.peer[0] for c in handshakes)
        top = max(held.values())
        return next(c for c in handshakes if held[c.peer[0]] == top)
    return None


def _listen(address):
    host, port = address
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(socket.SOMAXCONN)
    except OSError as e:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock
