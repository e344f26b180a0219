"""The socket server of ``mysqlbackup serve``: one thread per connection.

Each connection gets the handshake of a MariaDB primary, is authenticated
(mysql_native_password against the one user the server was started with),
answers the replica's set-up queries (``replay.serve.queries``), and on
COM_BINLOG_DUMP streams what ``replay.serve.feed`` reads from the archive, then
heartbeats until the replica goes. A replica that disconnects is logged and the
server keeps serving the others; a dump from a server_id already dumping ends
the older connection, as a primary does.
"""

import logging
import random
import select
import socket
import ssl
import threading
import time
from dataclasses import dataclass, field, replace

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos
from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.errors import MysqlBackupError, UsageError, mask_url
from mysqlbackup.source.protocol import BINLOG_DUMP_NON_BLOCK, BINLOG_SEND_ANNOTATE_ROWS_EVENT
from replay.planning.selection import Selection
from replay.serve import packets as pk
from replay.serve.feed import (NO_CHECKSUM, DumpContext, DumpError, DumpStart, dump_events,
                               gtid_state_at)
from replay.serve.queries import ServerFacts, Session, answer

log = logging.getLogger(__name__)

COM_QUIT, COM_INIT_DB, COM_QUERY, COM_PING = 0x01, 0x02, 0x03, 0x0E
COM_BINLOG_DUMP, COM_REGISTER_SLAVE = 0x12, 0x15
POLL_SLICE = 0.5          # longest wait, so that stop() is seen
SEND_TIMEOUT = 60.0       # a peer that sends or takes no bytes for this long is gone


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
    if options.require_tls and not options.tls_cert:
        raise UsageError("--require-tls needs --tls-cert (and --tls-key)")
    if not options.password:
        raise UsageError("serve needs a password for its user ($MYSQLBACKUP_SERVE_PASSWORD "
                         "or --password-file)")
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
        self.tls_context = _tls_context(options.tls_cert, options.tls_key)
        self.source, units, _ = self.plan()
        self.facts = self._facts(units)
        self.listener = _listen(options.listen)
        self.lock, self.ended = threading.Condition(), None
        self.connections, self.dumps, self.errors = {}, {}, []
        self.stopping, self.next_id, self.thread = False, 1, None
        self.dumps_started, self.dump_tls = 0, []

    # -- archive ---------------------------------------------------------------------

    def plan(self):
        """(source, units, True when a stop datetime left later files out), as the
        archive holds them now (replay's own planning)."""
        from replay.job import ReplayOptions, plan
        opts = ReplayOptions(self.options.archive_url, dict(self.options.storage_options),
                             self.options.source_name, self.options.selection,
                             keyring=self.keyring)
        return plan(opts)

    def more_than(self, end):
        """True when the archive now holds a transaction past ``end``: one listing and
        at most one index read (a poll must stay cheap on a big archive), never a
        file whose index is not written yet. A store error: False (looked at again)."""
        from mysqlbackup.archive.listing import ArchiveListing
        from mysqlbackup.archive.store import ArchiveStore
        try:
            listing = ArchiveListing(ArchiveStore(self.options.archive_url,
                                                  self.options.storage_options))
            index = _newest_index(listing, self.source, end.file)
        except Exception as e:  # noqa: BLE001 - the archive may be back at the next look
            log.warning("looking for newly archived transactions failed: %s", mask_url(e))
            return False
        if index is None:
            return False
        if binlog_sort_key(index["name"]) > binlog_sort_key(end.file):
            return True
        return index["end"] > end.pos and index.get("last_gtid") not in (None, end.last_gtid)

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
            raise UsageError(f"serve speaks MariaDB's replication protocol; {last['name']} "
                             f"was written by {fde.server_version}")
        gtid = last["index"].get("last_gtid") or ""
        return ServerFacts(
            server_id=last["index"].get("server_id") or 1,
            version="5.5.5-" + fde.server_version,
            checksum="CRC32" if fde.checksum_alg == ev.CHECKSUM_CRC32 else "NONE",
            domain_id=next(iter(MariaGtidPos.parse(gtid).domains), 0),
            gtid_binlog_pos=last["index"].get("gtid_after") or "",
            gtid_pos_at=lambda file, pos: gtid_state_at(units, file, pos))

    def _read_fde(self, unit):
        from replay.serve.feed import walk_events
        chunks = self.chunks(unit)
        try:
            for _, event in walk_events(chunks, unit["name"], unit["partial"]):
                return ev.parse_format_description(event)
        finally:
            chunks.close()
        raise UsageError(f"{unit['where']} holds no format description event")

    # -- lifecycle -------------------------------------------------------------------

    def start(self):
        self.thread = threading.Thread(target=self._accept, name="serve-accept", daemon=True)
        self.thread.start()

    def _accept(self):
        while not self.stopping:
            try:
                sock, peer = self.listener.accept()
            except OSError:
                return  # the listener was closed: stop()
            with self.lock:
                if self.stopping:  # accepted while stop() ran: never served
                    sock.close()
                    return
                conn_id, self.next_id = self.next_id, self.next_id + 1
                conn = _Connection(self, sock, peer, conn_id)
                self.connections[conn_id] = conn
            conn.thread.start()

    def stop(self):
        with self.lock:
            self.stopping = True
            connections = list(self.connections.values())
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

    def forget(self, conn):
        with self.lock:
            self.connections.pop(conn.id, None)
            for server_id, held in list(self.dumps.items()):
                if held is conn:
                    del self.dumps[server_id]


def _newest_index(listing, source, file):
    """The index of ``file`` (sealed, or its newest indexed segment), or of a file after
    it when the archive holds one with its index; None when neither."""
    key = binlog_sort_key(file)
    sealed = {n: slots for n, slots in listing.sealed[source].items() if "index" in slots}
    later = [n for n in sealed if binlog_sort_key(n) > key]
    later += [n for n, segs in listing.segments[source].items()
              if binlog_sort_key(n) > key and any("index" in sl for sl in segs.values())]
    if later:
        return {"name": min(later, key=binlog_sort_key)}
    if file in sealed:
        return listing.read_index(sealed[file]["index"])
    done = [r for r, slots in listing.segments[source].get(file, {}).items() if "index" in slots]
    return listing.read_index(listing.segments[source][file][max(done)]["index"]) if done \
        else None


def _tls_context(cert, key):
    """The server-side SSLContext of ``cert``/``key`` (None without a certificate);
    UsageError when they cannot be loaded."""
    if not cert:
        if key:
            raise UsageError("--tls-key needs --tls-cert")
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as e:
        raise UsageError(f"cannot load the TLS certificate {cert}"
                         f"{f' and key {key}' if key else ''}: {e.strerror or e}") from None
    return context


def _listen(address):
    host, port = address
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
        sock.listen(16)
    except OSError as e:
        sock.close()
        raise UsageError(f"cannot listen on {host}:{port}: {e.strerror or e}") from None
    return sock


class Disconnected(Exception):
    """The peer closed the connection (or stop() did)."""


class _Connection:
    """One client connection: handshake, commands, at most one dump."""

    def __init__(self, server, sock, peer, conn_id):
        self.server, self.sock, self.peer, self.id = server, sock, peer, conn_id
        self.session, self.buffer, self.closed = Session(), b"", False
        self.replica_id, self.tls = None, None
        self.thread = threading.Thread(target=self.run, name=f"serve-conn-{conn_id}",
                                       daemon=True)

    def close(self):
        self.closed = True
        try:  # the socket's own shutdown, also under TLS (from another thread)
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def run(self):
        where = f"{self.peer[0]}:{self.peer[1]}"
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self.sock.settimeout(SEND_TIMEOUT)  # a client silent this long is gone
            if self._authenticate():
                self._commands()
        except (Disconnected, OSError) as e:
            log.info("connection %d from %s (replica server_id %s): disconnected%s", self.id,
                     where, self.replica_id, "" if isinstance(e, Disconnected) else f": {e}")
        except Exception:  # noqa: BLE001 - one connection's bug must not stop the others
            log.exception("connection %d from %s failed", self.id, where)
        finally:
            self.sock.close()
            self.server.forget(self)

    # -- packets -----------------------------------------------------------------------

    def _recv(self, n):
        """``n`` bytes, never more taken from the socket: a client's TLS ClientHello
        may follow its SSL request at once, and is the TLS layer's to read."""
        while len(self.buffer) < n:
            data = self.sock.recv(n - len(self.buffer))
            if not data:
                raise Disconnected()
            self.buffer += data
        out, self.buffer = self.buffer[:n], self.buffer[n:]
        return out

    def read_packet(self):
        """(payload, sequence id) of the next packet (16 MiB pieces joined)."""
        parts = []
        while True:
            head = self._recv(4)
            size = head[0] | head[1] << 8 | head[2] << 16
            parts.append(self._recv(size))
            if size < pk.MAX_PAYLOAD:
                return b"".join(parts), head[3]

    def send(self, payloads, seq):
        """Send payloads with consecutive sequence ids from ``seq``; the next id."""
        out = []
        for payload in payloads:
            data, seq = pk.frames(payload, seq)
            out.append(data)
        self.sock.sendall(b"".join(out))
        return seq

    # -- handshake ---------------------------------------------------------------------

    def _authenticate(self):
        scramble = bytes(random.SystemRandom().randrange(0x21, 0x7F) for _ in range(20))
        context = self.server.tls_context
        self.send([pk.handshake_v10(self.id, self.server.facts.version, scramble,
                                    ssl=context is not None)], 0)
        payload, seq = self.read_packet()
        if context is not None and pk.is_ssl_request(payload):
            payload, seq = self._start_tls(context)
        try:
            response = pk.parse_handshake_response(payload)
        except (ValueError, IndexError) as e:
            self.send([pk.err_packet(1043, f"Bad handshake ({e})")], seq + 1)
            return False
        token, seq = response.auth, seq + 1
        if response.plugin and response.plugin != pk.NATIVE_PASSWORD:
            self.send([pk.auth_switch_request(scramble)], seq)
            token, seq = self.read_packet()
            seq += 1
        options = self.server.options
        if response.user == options.user and pk.native_password_ok(
                self.server.stored_hash, scramble, token):
            if self.tls or not options.require_tls:
                self.send([pk.ok_packet()], seq)
                return True
            why = "clear text refused (--require-tls), as for a user REQUIRE SSL"
        else:
            why = "wrong user or password"
        log.warning("connection %d from %s: access denied for user %r: %s", self.id,
                    self.peer[0], response.user, why)
        self.send([pk.err_packet(pk.ER_ACCESS_DENIED, f"Access denied for user "
                                 f"'{response.user}'@'{self.peer[0]}' (using password: "
                                 f"{'YES' if token else 'NO'})")], seq)
        return False

    def _start_tls(self, context):
        """After the client's SSL request: the TLS handshake on this socket, then the
        real HandshakeResponse read over TLS, with its sequence id (the ids go on from
        the SSL request's, as with mariadbd: request 1, response 2, OK 3)."""
        self.sock = context.wrap_socket(self.sock, server_side=True)
        if self.closed:  # close() ran on the socket before it was wrapped
            raise Disconnected()
        self.tls = self.sock.version()
        log.info("connection %d from %s: %s, cipher %s", self.id, self.peer[0], self.tls,
                 self.sock.cipher()[0])
        return self.read_packet()

    # -- commands ----------------------------------------------------------------------

    def _commands(self):
        while not self.closed:
            payload, _ = self.read_packet()
            command = payload[0] if payload else None
            if command == COM_QUIT:
                return
            if command == COM_QUERY:
                reply = answer(payload[1:].decode("utf-8", "replace"), self.session,
                               self.server.facts)
                self.send(reply.payloads(), 1)
            elif command in (COM_PING, COM_INIT_DB):
                self.send([pk.ok_packet()], 1)
            elif command == COM_REGISTER_SLAVE:
                self.replica_id = pk.parse_register_slave(payload)
                self.send([pk.ok_packet()], 1)
            elif command == COM_BINLOG_DUMP:
                return self._dump(pk.parse_binlog_dump(payload))
            else:
                self.send([pk.err_packet(pk.ER_UNKNOWN_COM, "Unknown command")], 1)

    # -- the dump ----------------------------------------------------------------------

    def _dump(self, request):
        server, session = self.server, self.session
        self.replica_id = request.server_id
        server.dump_started(self, request.server_id)
        start = DumpStart(request.file, request.pos, session.connect_state)
        log.info("connection %d: dump for server_id %d from %s", self.id, request.server_id,
                 f"GTID {start.gtids}" if start.gtids is not None
                 else f"{request.file or '(first file)'}:{request.pos}")
        out = _Sender(self, session.semi_sync)
        try:
            if server.facts.checksum != "NONE" and not session.checksum_wanted:
                raise DumpError(NO_CHECKSUM)
            end, follow = self._stream(request, start, out)
            while True:
                if request.flags & BINLOG_DUMP_NON_BLOCK:  # ends, as a server's does
                    return out.packet(pk.eof_packet())
                self._idle(end, out, server.options.poll_interval if follow else None)
                if server.more_than(end):
                    end, follow = self._stream(request, DumpStart(end.file, end.pos), out,
                                               end)
        except DumpError as e:
            self._refuse(e.code, e.message, out)
        except MysqlBackupError as e:
            self._refuse(pk.ER_MASTER_FATAL_READING_BINLOG, mask_url(str(e)), out)

    def _stream(self, request, start, out, previous=None):
        """Send what the archive holds from ``start`` to its end or the stop point;
        (EndInfo, True when the archive may still grow past it: no stop point met).
        ``previous``: the end of what was sent before (the dump resumes at it)."""
        server = self.server
        try:
            _, units, cut = server.plan()
        except MysqlBackupError as e:
            if previous is None:
                raise
            # an upload in flight (a data object before its index): nothing sent yet
            log.warning("the archive grew but cannot be planned yet: %s", mask_url(e))
            return previous, True
        ctx = DumpContext(server.chunks, server.options.selection, server.facts.server_id,
                          server.facts.checksum == "CRC32",
                          "stop datetime reached" if cut else None,
                          bool(request.flags & BINLOG_SEND_ANNOTATE_ROWS_EVENT))
        for kind, value in dump_events(units, start, ctx, resume=previous is not None):
            if self.closed:
                raise Disconnected()
            if kind == "event":
                out.event(value)
                continue
            out.flush()
            if previous is not None and value.last_gtid is None:
                value.last_gtid = previous.last_gtid
            log.info("connection %d (server_id %s): all sent up to %s:%d (last GTID %s; %s)",
                     self.id, self.replica_id, value.file, value.pos, value.last_gtid,
                     value.reason)
            server.dump_ended(value)
            return value, value.reason == "end of the archive"
        raise AssertionError("dump_events ends with an 'end' item")

    def _refuse(self, code, message, out):
        log.warning("connection %d (server_id %s): dump refused: %s", self.id, self.replica_id,
                    message)
        self.server.dump_failed(code, message)
        out.packet(pk.err_packet(code, message))

    def _idle(self, end, out, poll=None):
        """After the last transaction: heartbeats at the replica's period until it goes
        (Disconnected, also on stop()), or until ``poll`` seconds passed (None: never)."""
        period = self.session.heartbeat_ns / 1e9
        beat = pk.heartbeat(end.file, end.pos, self.server.facts.server_id,
                            self.server.facts.checksum == "CRC32")
        now = time.monotonic()
        due = now + period if period > 0 else None
        until = now + poll if poll else None
        while not self.closed:
            now = time.monotonic()
            if until is not None and now >= until:
                return
            wait = min([POLL_SLICE] + [t - now for t in (due, until) if t is not None])
            readable, _, _ = select.select([self.sock], [], [], max(0.0, wait))
            if readable and not self.sock.recv(4096):  # ACKs of a semi-sync replica: dropped
                raise Disconnected()
            if due is not None and time.monotonic() >= due:
                out.packet(pk.event_packet(beat, self.session.semi_sync))
                due = time.monotonic() + period
        raise Disconnected()


class _Sender:
    """The packets of one dump, their sequence ids counted from 1, events gathered into
    sends of up to ``BATCH`` bytes (one system call per event would cost more than the
    reading)."""

    BATCH = 256 << 10

    def __init__(self, conn, semi_sync):
        self.conn, self.semi_sync, self.seq = conn, semi_sync, 1
        self.pending, self.size = [], 0

    def event(self, event):
        data, self.seq = pk.frames(pk.event_packet(event, self.semi_sync), self.seq)
        self.pending.append(data)
        self.size += len(data)
        if self.size >= self.BATCH:
            self.flush()

    def packet(self, payload):
        """Send one packet now (after what is gathered)."""
        data, self.seq = pk.frames(payload, self.seq)
        self.pending.append(data)
        self.flush()

    def flush(self):
        if self.pending:
            self.conn.sock.sendall(b"".join(self.pending))
            self.pending, self.size = [], 0
