"""The socket server of ``mysqlbackup serve``: one thread per connection.

Each connection (``replay.serve.connection``) gets the handshake of the primary the
archive's source was: MariaDB's, or for a MySQL source mysqld 8.4/9.x's
(``replay.serve.mysql``); is authenticated against the one user the server was
started with (mysql_native_password; for MySQL caching_sha2_password too, its RSA
key pair generated at start or read from ``ServeOptions.rsa_key``), answers the
replica's set-up queries (``replay.serve.queries``), and on COM_BINLOG_DUMP (or
MySQL's COM_BINLOG_DUMP_GTID) streams what ``replay.serve.feed`` (for MySQL with
``replay.serve.mysqlfeed``'s walk) reads from the archive, then heartbeats until the
replica goes. A replica that disconnects is logged and the
server keeps serving the others; a dump from a server_id already dumping ends the
older connection, as a primary does.

The accept loop never ends but on ``stop()``: out of descriptors, memory or threads
it logs, backs off and tries again. Connections are bounded: at most
MAX_HANDSHAKES not logged in, MAX_HANDSHAKES_PER_ADDRESS of one address (a new one
ends its address's oldest, or the busiest address's: a flood of idle or slow clients
cannot keep a replica out), at most ``max_connections`` logged in (more get
1040 "Too many connections", as mariadbd answers), and past both, a connection
gets 1040 at once. Refusals are counted (``ServeHandle.stats``) and logged at
most once per kind every few seconds.
"""

import errno
import logging
import os
import shutil
import socket
import ssl
import tempfile
import threading
import time
from collections import Counter, OrderedDict, deque
from dataclasses import dataclass, field, replace

from mysqlbackup.archive.listing import ArchiveListing
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos
from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.errors import UsageError, mask_url
from replay.planning.selection import Selection
from replay.serve import certs
from replay.serve import packets as pk
from replay.serve.catalog import Catalog, base_tables, newest_table_maps
from replay.serve.connection import Connection
from replay.serve.feed import file_end, gtid_state_at, walk_events
from replay.serve.limits import (MAX_CONNECTIONS, MAX_HANDSHAKES, MAX_HANDSHAKES_PER_ADDRESS,
                                 LoginThrottle, LogLimiter, throttle_key)
from replay.serve.queries import ServerFacts

log = logging.getLogger(__name__)

# accept() failures that a full process or system causes: wait, then accept again
RESOURCE_ERRNOS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)
MAX_BACKOFF = 1.0
KEPT = 1000               # errors and TLS versions of the newest dumps kept for the handle
GTID_POS_TTL = 1.0        # @@gtid_binlog_pos: the archive's end, looked up at most this often


@dataclass
class ServeOptions:
    """What to serve, where, to whom. ``selection`` is a replay Selection
    (``replay.planning.options.build_selection``): its stop point and exclusions
    apply; ``listen`` port 0 picks a free port (``ServeHandle.port``)."""

    archive_url: str
    source_name: str = None
    listen: tuple = ("127.0.0.1", 0)
    user: str = "mysqlbackup_serve"
    password: str = None
    selection: Selection = field(default_factory=Selection)
    identity: str = None            # age identity file for encrypted objects
    keyring: object = None          # an archive.codec Keyring (instead of ``identity``)
    storage_options: dict = field(default_factory=dict)
    poll_interval: float = 2.0      # after the archive's end, look for more (None: never)
    tls_cert: str = None            # PEM certificate (chain) offered to replicas: TLS on
    tls_key: str = None             # its private key (PEM; may be inside ``tls_cert``)
    require_tls: bool = False       # a replica that does not ask for TLS is denied (1045)
    max_connections: int = MAX_CONNECTIONS  # logged-in connections at once (more: 1040)
    metrics_address: str = None     # HOST:PORT of a Prometheus endpoint (None: off)
    rsa_key: str = None             # MySQL: PEM RSA private key of caching_sha2_password's
                                    # exchange without TLS (None: one generated at start)


class ServeHandle:
    """A running server: ``host``, ``port``, ``source``, ``stop()``, ``wait_end()``;
    a context manager that stops it on exit."""

    def __init__(self, server):
        self._server = server
        self.host, self.port = server.listener.getsockname()[:2]
        self.source = server.source

    def stop(self):
        """Close the listener and every connection; join their threads."""
        self._server.stop()

    def wait_end(self, timeout=None):
        """The EndInfo of the newest dump that reached its end (the stop point or the
        archive's end; ``last_gtid``: the last transaction sent), or None when none did
        within ``timeout`` seconds."""
        return self._server.wait_end(timeout)

    @property
    def dumps(self):
        """How many dumps replicas started (a reconnect starts one more)."""
        return self._server.dumps_started

    @property
    def dump_tls(self):
        """The TLS version of each dump's connection ('TLSv1.3'; None: clear text),
        oldest first."""
        return list(self._server.dump_tls)

    @property
    def stats(self):
        """Counts of what the server refused or ended: 'refused_connections' (1040),
        'refused_logins' (1045), 'bad_handshakes' (1043), 'too_large' (1153),
        'timed_out', 'evicted' (a handshake ended for a newer one), 'accept_errors'."""
        with self._server.lock:
            return dict(self._server.stats)

    @property
    def metrics_port(self):
        """The port of the Prometheus endpoint (None: off)."""
        metrics = self._server.metrics
        return metrics.port if metrics is not None else None

    @property
    def connections(self):
        """How many connections are open now (logged in or not)."""
        with self._server.lock:
            return len(self._server.connections)

    @property
    def errors(self):
        """The (code, message) of every error sent to a replica's dump, oldest first."""
        return list(self._server.errors)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()


def start_server(options):
    """Check the archive (its source, its files, what opens them), listen, and serve
    in background threads; returns the ServeHandle. UsageError / MysqlBackupError
    when the archive, the source or the address cannot be used."""
    if options.max_connections < 1:
        raise UsageError("--max-connections must be at least 1")
    if not options.password:
        raise UsageError("serve needs a password for its user ($MYSQLBACKUP_SERVE_PASSWORD "
                         "or --replica-password-file)")
    selection = options.selection
    if selection.databases or selection.tables or selection.rewrite:
        raise UsageError("serve sends whole transactions: no --database, --table or "
                         "--rewrite-db (the replica's replicate-do-db/-table filter them)")
    # where to start is the replica's to say (its GTID state or file:position)
    options = replace(options, selection=replace(selection, start_gtids=None,
                                                 start_position=None))
    server = _Server(options)
    server.start()
    return ServeHandle(server)


class _Server:
    def __init__(self, options):
        from mysqlbackup.archive.codec import keyring_from
        self.options = options
        self.keyring = options.keyring or keyring_from(options.identity)
        self.stored_hash = pk.password_hash(options.password)
        self.tls_context, self.tls_fingerprint = _tls_context(options.tls_cert,
                                                              options.tls_key)
        self.source, units, _ = self.units()
        self.facts = self._facts(units)
        self.catalog = Catalog(
            self.facts.flavor, lambda: newest_table_maps(self.units()[1], self.chunks),
            lambda: base_tables(self.options.archive_url, self.options.storage_options,
                                self.source, self.keyring))
        self.facts.binary_logs = self.binary_logs
        self.facts.row_metadata = self.catalog.row_metadata
        self.facts.table_columns = self.catalog.table
        self.listener = _listen(options.listen)
        self.lock, self.ended = threading.Condition(), None
        self.connections, self.dumps, self.errors = {}, {}, deque(maxlen=KEPT)
        self.handshaking, self.authenticated = OrderedDict(), set()
        self.stopping, self.next_id, self.thread = False, 1, None
        self.wake = threading.Event()   # set by stop(): ends a back-off at once
        self.dumps_started, self.dump_tls = 0, deque(maxlen=KEPT)
        self.stats = Counter()
        self.throttle = LoginThrottle(time.monotonic)
        self.limiter = LogLimiter(time.monotonic)
        self._gtid_now = (None, None)   # (when looked up, value)
        self._gtid_lookup = threading.Lock()  # one lookup at a time; the others use it
        self.metrics = None             # the HTTP server of --metrics-address
        self.rsa_key, self.sha2_cache = None, set()  # MySQL: caching_sha2_password's
        if self.facts.flavor == "mysql":
            self.rsa_key = _rsa_key(options.rsa_key)

    # -- archive ---------------------------------------------------------------------

    def units(self):
        """(source, units, True when a stop datetime left later files out), as the
        archive holds them now (replay's own planning)."""
        from replay.planning.plan import ReplayOptions, units_to_read
        opts = ReplayOptions(self.options.archive_url, dict(self.options.storage_options),
                             self.options.source_name, self.options.selection,
                             keyring=self.keyring)
        return units_to_read(opts)

    def newest_index(self, file, what, epoch=None):
        """``_newest_index`` of the archive as it is now (one listing, at most one index
        read); None, with a warning about ``what``, when the store fails (looked at
        again later)."""
        try:
            listing = ArchiveListing(ArchiveStore(self.options.archive_url,
                                                  self.options.storage_options))
            return _newest_index(listing, self.source, file, epoch)
        except Exception as e:  # noqa: BLE001 - the archive may be back at the next look
            log.warning("%s failed: %s", what, mask_url(e))
            return None

    def more_than(self, end):
        """True when the archive now holds a transaction past ``end``: one listing and
        at most one index read (a poll must stay cheap on a big archive), never a
        file whose index is not written yet. A store error: False (looked at again)."""
        index = self.newest_index(end.file, "looking for newly archived transactions",
                                  end.epoch)
        if index is None:
            return False
        if index.get("later"):
            return True
        return index["end"] > end.pos and index.get("last_gtid") not in (None, end.last_gtid)

    def archive_end_gtid(self):
        """The GTID state at the archive's end now (the newest file's index), looked up at
        most every GTID_POS_TTL seconds; None when the store cannot tell."""
        with self._gtid_lookup:
            with self.lock:
                when, value = self._gtid_now
                if when is not None and time.monotonic() - when < GTID_POS_TTL:
                    return value
            index = self.newest_index(None, "reading the archive's end")
            value = index.get("gtid_after") if index else None
            with self.lock:
                self._gtid_now = (time.monotonic(), value)
            return value

    def binary_logs(self):
        """[(file, size)] of the archive now, as SHOW BINARY LOGS lists a server's (the
        newest file up to its last whole transaction); a store's failure is raised (the
        client gets an error, not an empty list)."""
        _, units, _ = self.units()
        sizes = {}
        for unit in units:  # a file of two epochs (a failover): the later one's size
            sizes[unit.name] = file_end(unit)
        return list(sizes.items())

    def chunks(self, unit):
        from replay.serve.feed import unit_chunks
        return unit_chunks(unit, self.options.archive_url, self.options.storage_options,
                           self.keyring)

    def _facts(self, units):
        if not units:
            raise UsageError(f"the archive {mask_url(self.options.archive_url)} holds no "
                             f"binlog of source {self.source!r} to serve")
        last = units[-1]
        fde = self._read_fde(last)
        if not ev.is_mariadb_version(fde.server_version):
            return self._mysql_facts(units, fde)
        gtid = last.index.get("last_gtid") or ""
        return ServerFacts(
            server_id=last.index.get("server_id") or 1,
            version="5.5.5-" + fde.server_version,
            checksum="CRC32" if fde.checksum_alg == ev.CHECKSUM_CRC32 else "NONE",
            domain_id=next(iter(MariaGtidPos.parse(gtid).domains), 0),
            gtid_binlog_pos=last.index.get("gtid_after") or "",
            # the archive's end now, unless a stop point fixes what is served
            gtid_binlog_pos_now=(self.archive_end_gtid if self.options.selection.stop.is_end
                                 else None),
            gtid_pos_at=lambda file, pos: gtid_state_at(units, file, pos))

    def _mysql_facts(self, units, fde):
        """A MySQL source's archive, served as a MySQL primary: its version, server_id,
        server_uuid (the UUID of its newest own GTID), GTIDs before the first file."""
        last = units[-1].index
        gtid = last.get("last_gtid") or next(
            (u.index["last_gtid"] for u in reversed(units) if u.index.get("last_gtid")),
            None)
        if not gtid or ":" not in gtid:
            raise UsageError(f"the archive of {self.source!r} holds no MySQL GTID: serve "
                             "serves a MySQL source with gtid_mode=ON")
        return ServerFacts(
            server_id=last.get("server_id") or 1, version=fde.server_version,
            checksum="CRC32" if fde.checksum_alg == ev.CHECKSUM_CRC32 else "NONE",
            gtid_binlog_pos=last.get("gtid_after") or "",
            gtid_binlog_pos_now=(self.archive_end_gtid if self.options.selection.stop.is_end
                                 else None),
            flavor="mysql", server_uuid=gtid.split(":")[0],
            gtid_purged=units[0].index.get("gtid_before") or "")

    def _read_fde(self, unit):
        chunks = self.chunks(unit)
        try:
            for _, event in walk_events(chunks, unit.name, unit.partial):
                return ev.parse_format_description(event)
        finally:
            chunks.close()
        raise UsageError(f"{unit.where} holds no format description event")

    # -- lifecycle -------------------------------------------------------------------

    def start(self):
        if self.options.metrics_address:
            from replay.serve.metrics import serve_metrics
            try:
                self.metrics = serve_metrics(self, self.options.metrics_address)
            except BaseException:
                self.listener.close()
                raise
        self.thread = threading.Thread(target=self._accept, name="serve-accept", daemon=True)
        self.thread.start()

    def _accept(self):
        backoff = 0.0
        while not self.stopping:
            try:
                sock, peer = self.listener.accept()
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
        self.count("accept_errors")
        if error.errno not in RESOURCE_ERRNOS:  # e.g. ECONNABORTED: that client is gone
            return 0.0
        backoff = min(MAX_BACKOFF, backoff * 2 or 0.01)
        self.note("accept", logging.WARNING, "cannot accept connections: %s; accepting "
                  "again in %.2f s", error.strerror or error, backoff)
        self.wake.wait(backoff)
        return backoff

    def _admit(self, sock, peer):
        """Serve a new connection in a thread of its own, or refuse it with 1040 when the
        server is full; a full set of handshakes ends its oldest."""
        with self.lock:
            if self.stopping:  # accepted while stop() ran: never served
                sock.close()
                return
            if len(self.connections) >= self.options.max_connections + MAX_HANDSHAKES:
                conn, evicted = None, None
            else:
                evicted = self._evict_for(peer[0])
                conn_id, self.next_id = self.next_id, self.next_id + 1
                conn = Connection(self, sock, peer, conn_id)
                self.connections[conn_id] = self.handshaking[conn_id] = conn
        if conn is None:
            return self._refuse_now(sock, peer)
        if evicted is not None:
            self.count("evicted")
            self.note("evicted", logging.WARNING, "too many connections logging in: %d from "
                      "%s is closed for a new one (at most %d at once, %d an address)",
                      evicted.id, evicted.peer[0], MAX_HANDSHAKES, MAX_HANDSHAKES_PER_ADDRESS)
            evicted.close()
        try:
            conn.thread.start()
        except RuntimeError as e:  # no thread can be started now
            self.note("thread", logging.WARNING, "cannot serve a connection: %s", e)
            sock.close()
            self.forget(conn)

    def _evict_for(self, address):
        """The handshake to end for a new one from ``address`` (under the lock), or None:
        its own oldest when it holds its share already, else, when all are taken, the
        oldest of the address holding the most (one address cannot push others out)."""
        mine = [c for c in self.handshaking.values() if c.peer[0] == address]
        if len(mine) >= MAX_HANDSHAKES_PER_ADDRESS:
            victim = mine[0]
        elif len(self.handshaking) >= MAX_HANDSHAKES:
            held = Counter(c.peer[0] for c in self.handshaking.values())
            top = max(held.values())
            victim = next(c for c in self.handshaking.values() if held[c.peer[0]] == top)
        else:
            return None
        del self.handshaking[victim.id]
        return victim

    def _refuse_now(self, sock, peer):
        """1040 "Too many connections" as the first packet, as mariadbd sends it, then
        close; never waits on the peer."""
        self.count("refused_connections")
        self.note("full", logging.WARNING, "refused a connection from %s: %d connections "
                  "open (--max-connections %d and %d logging in)", peer[0],
                  self.options.max_connections + MAX_HANDSHAKES, self.options.max_connections,
                  MAX_HANDSHAKES)
        try:
            sock.setblocking(False)
            sock.send(pk.frames(pk.err_packet(pk.ER_CON_COUNT_ERROR, "Too many connections",
                                              before_handshake=True), 0)[0])
        except OSError:
            pass
        sock.close()

    def stop(self):
        with self.lock:
            self.stopping = True
            connections = list(self.connections.values())
        self.wake.set()
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()
        for conn in connections:
            conn.close()
        if self.thread is not None:
            self.thread.join(timeout=5)
        for conn in connections:
            conn.thread.join(timeout=5)
        if self.metrics is not None:
            self.metrics.close()

    def wait_end(self, timeout):
        with self.lock:
            self.lock.wait_for(lambda: self.ended is not None, timeout)
            return self.ended

    # -- bookkeeping of connections ----------------------------------------------------

    def dump_started(self, conn, server_id):
        """Register ``conn`` as the dump of ``server_id``; end an older one."""
        with self.lock:
            self.dumps_started += 1
            self.dump_tls.append(conn.tls)
            older = self.dumps.get(server_id)
            self.dumps[server_id] = conn
        if older is not None and older is not conn:
            log.info("connection %d: a new dump from server_id %d replaces it", older.id,
                     server_id)
            older.close()

    def dump_ended(self, end):
        with self.lock:
            self.ended = end
            self.lock.notify_all()

    def dump_failed(self, code, message):
        with self.lock:
            self.errors.append((code, message))

    def logged_in(self, conn):
        """``conn`` logged in: True when it may stay (fewer than max_connections are)."""
        with self.lock:
            self.handshaking.pop(conn.id, None)
            self.throttle.succeeded(throttle_key(conn.peer[0]))
            if len(self.authenticated) >= self.options.max_connections:
                self.stats["refused_connections"] += 1
                return False
            self.authenticated.add(conn.id)
            return True

    def login_delay(self, address):
        """Seconds a login from ``address`` waits (its recent failed logins; IPv6 by /64)."""
        with self.lock:
            return self.throttle.delay(throttle_key(address))

    def login_failed(self, address):
        with self.lock:
            self.throttle.failed(throttle_key(address))
            self.stats["refused_logins"] += 1

    def count(self, what):
        with self.lock:
            self.stats[what] += 1

    def note(self, kind, level, message, *args):
        """Log ``message`` unless a line of ``kind`` was logged a moment ago (then it is
        counted, and the next line of that kind says how many were left out)."""
        with self.lock:
            due, left_out = self.limiter.allow(kind)
        if due:
            log.log(level, message + (f" ({left_out} more like it not logged)" if left_out
                                      else ""), *args)

    def forget(self, conn):
        with self.lock:
            self.connections.pop(conn.id, None)
            self.handshaking.pop(conn.id, None)
            self.authenticated.discard(conn.id)
            for server_id, held in list(self.dumps.items()):
                if held is conn:
                    del self.dumps[server_id]


def _newest_index(listing, source, file, epoch=None):
    """The index of ``file`` (sealed, or its newest indexed segment), or of a file after
    it when the archive holds one with its index; None when neither. ``file`` None: the
    index of the newest file that has one. Only the newest epoch of the source's history
    is looked at: a ``file`` of an ``epoch`` before it is followed by that epoch's files
    (``{"name": ...}`` of its first, as for a file after it)."""
    number, source, _ = listing.epochs(source)[-1]
    if file is not None and epoch is not None and epoch < number:
        names = listing.sealed_names(source) + sorted(listing.segments[source],
                                                      key=binlog_sort_key)
        return {"name": names[0], "later": True} if names else None
    sealed = {n: slots for n, slots in listing.sealed[source].items() if "index" in slots}
    indexed = list(sealed) + [n for n, segs in listing.segments[source].items()
                              if any("index" in sl for sl in segs.values())]
    if file is None:
        if not indexed:
            return None
        file = max(indexed, key=binlog_sort_key)
    key = binlog_sort_key(file)
    later = [n for n in indexed if binlog_sort_key(n) > key]
    if later:
        return {"name": min(later, key=binlog_sort_key), "later": True}
    if file in sealed:
        return listing.read_index(sealed[file]["index"])
    done = [r for r, slots in listing.segments[source].get(file, {}).items() if "index" in slots]
    return listing.read_index(listing.segments[source][file][max(done)]["index"]) if done \
        else None


def _rsa_key(path):
    """The RSA private key of caching_sha2_password's exchange: read from ``path`` (PEM),
    or generated now (as mysqld does when it has none); UsageError when unusable."""
    from replay.serve import mysql as my
    if not path:
        return my.new_rsa_key()
    try:
        with open(path, "rb") as f:
            return my.load_rsa_key(f.read())
    except (OSError, ValueError, TypeError) as e:
        raise UsageError(f"cannot load the RSA key {path}: {getattr(e, 'strerror', None) or e}"
                         ) from None


def _tls_context(cert, key):
    """(server-side SSLContext, SHA-256 fingerprint of its certificate) of ``cert``/``key``,
    or of a self-signed certificate made now when no ``cert`` is given
    (``certs.self_signed``); UsageError when they cannot be loaded."""
    if not cert:
        if key:
            raise UsageError("--ssl-key needs --ssl-cert")
        pem, key_pem = certs.self_signed()
        return _context_of_pem(pem, key_pem), certs.fingerprint(pem)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
        with open(cert, "rb") as f:
            found = certs.fingerprint(f.read())
    except (OSError, ssl.SSLError, ValueError) as e:
        raise UsageError(f"cannot load the TLS certificate {cert}"
                         f"{f' and key {key}' if key else ''}: "
                         f"{getattr(e, 'strerror', None) or e}") from None
    return context, found


def _context_of_pem(pem, key_pem):
    """An SSLContext of a certificate and key held in memory (the ssl module loads only
    files: they pass through a private 0600 file, removed at once)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    folder = tempfile.mkdtemp(prefix="mysqlbackup-serve-tls-")
    try:
        path = os.path.join(folder, "cert.pem")
        with open(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600), "wb") as f:
            f.write(pem + key_pem)
        context.load_cert_chain(path)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return context


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
