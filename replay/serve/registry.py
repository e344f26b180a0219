"""The bookkeeping of ``mysqlbackup serve``'s connections, behind one lock of its own.

``Registry`` holds the connections open (``connections``), those still logging in
(``handshaking``, oldest first: the listener's eviction picks from them) and those
logged in, the dump of each replica's server_id (a new dump from one ends its older
connection, as a primary does), the end the newest dump reached (``wait_end``), the
errors sent to dumps and the TLS version of each dump's connection, the counts of what
was refused (``ServeHandle.stats``), the login throttle (``limits.LoginThrottle``),
the log limiter (``note``) and caching_sha2_password's cache of users who logged in
fully. Nobody outside takes its lock: every reader gets a method, the metrics and
the handle a ``Snapshot``.
"""

import logging
import threading
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass

from replay.serve.protocol.limits import LoginThrottle, LogLimiter, throttle_key

log = logging.getLogger("replay.serve.server")  # serve's lines, under the name they had

KEPT = 1000               # errors and TLS versions of the newest dumps kept for the handle


@dataclass(frozen=True)
class Snapshot:
    """The registry's counts at one moment (``ServeHandle``, the metrics)."""

    stats: dict             # what was refused or ended: ServeHandle.stats
    connections: int        # open now, logged in or not
    handshaking: int        # logging in now
    dumping: int            # replicas dumping now (one per server_id)
    dumps_started: int      # dumps started since the start (a reconnect starts one more)
    errors: tuple           # (code, message) of the newest dumps refused, oldest first
    dump_tls: tuple         # the TLS version of the newest dumps' connections (None: clear)


@dataclass(frozen=True)
class Admission:
    """What ``Registry.admit`` did with a new connection: ``conn`` registered (None:
    refused, the registry full or ``closed``), ``evicted`` the handshake it ends."""

    conn: object = None
    evicted: object = None
    closed: bool = False


class Registry:
    """The connections, dumps, counts and caches of one serve; thread-safe."""

    def __init__(self, max_connections):
        self.max_connections = max_connections
        self._lock, self._ended = threading.Condition(), None
        self._connections, self._dumps = {}, {}
        self._handshaking, self._authenticated = OrderedDict(), set()
        self._closed, self._next_id = False, 1
        self._errors, self._dump_tls = deque(maxlen=KEPT), deque(maxlen=KEPT)
        self._dumps_started, self._stats = 0, Counter()
        self._throttle = LoginThrottle(time.monotonic)
        self._limiter = LogLimiter(time.monotonic)
        self._sha2_cache = set()   # MySQL: caching_sha2_password's users logged in fully

    # -- connections -----------------------------------------------------------------

    def admit(self, make, capacity, choose_victim):
        """Register ``make(conn_id)``, a new connection still logging in, unless
        ``capacity`` connections are open or the registry is closed; ``choose_victim``
        (the handshakes, oldest first) -> the one to end for it, or None."""
        with self._lock:
            if self._closed:  # accepted while stop() ran: never served
                return Admission(closed=True)
            if len(self._connections) >= capacity:
                return Admission()
            victim = choose_victim(list(self._handshaking.values()))
            if victim is not None:
                del self._handshaking[victim.id]
            conn_id, self._next_id = self._next_id, self._next_id + 1
            conn = make(conn_id)
            self._connections[conn_id] = self._handshaking[conn_id] = conn
            return Admission(conn, victim)

    def close(self):
        """Admit no more; the connections open now (for stop() to end)."""
        with self._lock:
            self._closed = True
            return list(self._connections.values())

    def logged_in(self, conn):
        """``conn`` logged in: True when it may stay (fewer than max_connections are)."""
        with self._lock:
            self._handshaking.pop(conn.id, None)
            self._throttle.succeeded(throttle_key(conn.peer[0]))
            if len(self._authenticated) >= self.max_connections:
                self._stats["refused_connections"] += 1
                return False
            self._authenticated.add(conn.id)
            return True

    def forget(self, conn):
        """``conn`` ended: out of every set, and of the dumps."""
        with self._lock:
            self._connections.pop(conn.id, None)
            self._handshaking.pop(conn.id, None)
            self._authenticated.discard(conn.id)
            for server_id, held in list(self._dumps.items()):
                if held is conn:
                    del self._dumps[server_id]

    # -- logins ----------------------------------------------------------------------

    def login_delay(self, address):
        """Seconds a login from ``address`` waits (its recent failed logins; IPv6 by /64)."""
        with self._lock:
            return self._throttle.delay(throttle_key(address))

    def login_failed(self, address):
        """A login from ``address`` was denied: counted, and by its throttle."""
        with self._lock:
            self._throttle.failed(throttle_key(address))
            self._stats["refused_logins"] += 1

    def sha2_cached(self, user):
        """True when ``user`` logged in by caching_sha2_password's full authentication
        before (its next logins may take the fast one)."""
        with self._lock:
            return user in self._sha2_cache

    def sha2_remember(self, user):
        """``user`` logged in by caching_sha2_password's full authentication."""
        with self._lock:
            self._sha2_cache.add(user)

    # -- dumps -----------------------------------------------------------------------

    def dump_started(self, conn, server_id):
        """Register ``conn`` as the dump of ``server_id``; end an older one."""
        with self._lock:
            self._dumps_started += 1
            self._dump_tls.append(conn.tls)
            older = self._dumps.get(server_id)
            self._dumps[server_id] = conn
        if older is not None and older is not conn:
            log.info("connection %d: a new dump from server_id %d replaces it", older.id,
                     server_id)
            older.close()

    def dump_ended(self, end):
        """A dump reached ``end`` (an EndInfo): what ``wait_end`` answers from now on."""
        with self._lock:
            self._ended = end
            self._lock.notify_all()

    def dump_failed(self, code, message):
        """An error (``code``, ``message``) was sent to a dump."""
        with self._lock:
            self._errors.append((code, message))

    def wait_end(self, timeout):
        """The EndInfo of the newest dump that reached its end, or None when none did
        within ``timeout`` seconds."""
        with self._lock:
            self._lock.wait_for(lambda: self._ended is not None, timeout)
            return self._ended

    # -- counts and logs -------------------------------------------------------------

    def count(self, what):
        """One more of ``what`` (a ``ServeHandle.stats`` key)."""
        with self._lock:
            self._stats[what] += 1

    def note(self, kind, level, message, *args):
        """Log ``message`` unless a line of ``kind`` was logged a moment ago (then it is
        counted, and the next line of that kind says how many were left out)."""
        with self._lock:
            due, left_out = self._limiter.allow(kind)
        if due:
            log.log(level, message + (f" ({left_out} more like it not logged)" if left_out
                                      else ""), *args)

    def snapshot(self):
        """The counts now, as one consistent ``Snapshot``."""
        with self._lock:
            return Snapshot(dict(self._stats), len(self._connections),
                            len(self._handshaking), len(self._dumps), self._dumps_started,
                            tuple(self._errors), tuple(self._dump_tls))
