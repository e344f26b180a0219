"""The replication client: network I/O on top of PyMySQL's connection.

PyMySQL does the handshake and the setup queries; then this module writes the
replication commands itself and reads the dump straight from the connection's
buffered socket file, handing the bytes to the pure ``protocol.StreamDecoder``.

It uses these PyMySQL 1.2 internals (pinned in setup.cfg): ``_sock``, ``_rfile``,
``_write_bytes``, ``_read_packet``, ``_next_seq_id``, ``_force_close``.

Every connection-level failure, in any phase (TCP connect, handshake, setup
queries, dump), is a ``ConnectionLost`` (retried by the daemon), except a refused
login and a source that cannot be reached at all (``SourceError``). Nothing
waits without a bound: the handshake and setup queries have a read timeout, and
a dump that stays silent for several heartbeat periods is a dead link.
"""

import logging
import select
import socket
import ssl
import time

import pymysql

from mysqlbackup import speedups
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos
from mysqlbackup.errors import ConnectionLost, ResyncRequired, SourceError
from mysqlbackup.source import protocol
from mysqlbackup.source.connect import denied, new_connection, tls_failure

log = logging.getLogger(__name__)

BUFFER_SIZE = 8 << 20
# A batch takes what is waiting up to about this many bytes: then it is written (and
# fsynced when due) while the source goes on filling the socket; with larger batches the
# source waits on a full socket buffer during each write (measured in bench_stream.py).
BATCH_BYTES = 1 << 20
NUDGE_SERVER_ID = 4294967295  # the helper of nudge_ack_receiver uses this minus ours
SETUP_TIMEOUT = 15.0          # seconds a handshake or setup query may stay unanswered
POLL_SLICE = 0.5              # longest single wait, so that a stop request is seen
_ACCESS_DENIED, _UNKNOWN_VARIABLE = 1045, 1193
_CANT_CONNECT = 2003          # PyMySQL: the TCP connection could not be made
# client-side codes of a broken link (gone away, lost, handshake lost, out of sync)
_LINK_ERRORS = {2006, 2013, 2055, 2014, 0}


class ServerInfo:
    """What the daemon needs to know about the source before it dumps."""

    def __init__(self, version, server_id, server_uuid, log_bin, checksum, semi_sync_vars,
                 binlog_engine=None):
        self.version = version
        self.binlog_engine = binlog_engine  # MariaDB 12.3+: where its binlog lives
        self.flavor = "mariadb" if ev.is_mariadb_version(version) else "mysql"
        self.server_id = server_id
        self.server_uuid = server_uuid
        self.log_bin = log_bin
        self.checksum = checksum
        self.semi_sync_vars = semi_sync_vars  # {} when the source has no semi-sync plugin

    @property
    def identity(self):
        """Stable identity: server_uuid where the server has one, else its server_id."""
        return self.server_uuid or f"server-id-{self.server_id}"


class _Unmetered:
    """What a client counts without the daemon's metrics (``stream.metrics``): nothing."""

    def received(self, n_bytes, n_events):
        """Bytes and events of one batch, not counted."""


class ReplicaClient:
    """One replication connection to the source."""

    def __init__(self, source, server_id, semi_sync=True, heartbeat=1.0, connect_timeout=10,
                 metrics=None):
        self.source = source
        self.server_id = server_id
        self.want_semi_sync = semi_sync
        self.heartbeat = heartbeat
        self.connect_timeout = connect_timeout
        self.conn = None
        self.sock = None
        self.info = None
        self.decoder = None
        self.semi_sync = False
        # stream.metrics (the daemon hands it in): bytes and events received, per batch
        self.metrics = metrics if metrics is not None else _Unmetered()
        self.received_at = None   # perf_counter() when the newest batch's bytes were there

    # -- connection and setup ------------------------------------------------------

    def connect(self):
        """Open the connection and read the server facts.

        SourceError when the source refuses us or cannot be reached at all;
        ConnectionLost when the link breaks or stays silent during the set-up."""
        conn = new_connection(self.source, connect_timeout=self.connect_timeout,
                              read_timeout=SETUP_TIMEOUT, write_timeout=SETUP_TIMEOUT,
                              autocommit=True)
        try:
            conn.connect(self._open_socket())
        except pymysql.err.MySQLError as e:
            raise self._connect_error(e) from None
        self.conn = conn
        self.sock = conn._sock  # the TLS socket when TLS is on (it took over the TCP one)
        self.info = self._read_server_info()
        return self.info

    def _open_socket(self):
        """The TCP connection (ours, so that ``interrupt`` can shut it down)."""
        try:
            sock = socket.create_connection((self.source.host, self.source.port),
                                            self.connect_timeout)
        except OSError as e:
            raise SourceError(f"cannot connect to {self.source.address}: "
                              f"{e.strerror or e}") from None
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        self.sock = sock
        return sock

    def _connect_error(self, e):
        code = e.args[0] if e.args else 0
        if code == _ACCESS_DENIED:
            return denied(self.source)
        failure = tls_failure(e, self.source)
        if failure is not None:  # a certificate or a mode problem: retrying cannot help
            return failure
        if isinstance(e, pymysql.err.OperationalError) and code in _LINK_ERRORS | {
                _CANT_CONNECT}:
            return ConnectionLost(f"lost the connection to {self.source.address} during the "
                                  f"handshake: {e.args[-1]}")
        return SourceError(f"cannot log in to {self.source.address}: {e.args[-1]}")

    def interrupt(self):
        """Shut the connection down from another context (a signal handler, a thread):
        whatever waits on it returns at once with a lost connection."""
        sock = self.sock
        if sock is not None:
            try:  # the TCP shutdown under a TLS socket too (SSLSocket's own drops its state)
                socket.socket.shutdown(sock, socket.SHUT_RDWR)
            except OSError:
                pass

    def query(self, sql):
        """Run one statement on the control connection; return all rows."""
        try:
            with self.conn.cursor() as cur:
                cur.execute(sql)
                return cur.fetchall()
        except pymysql.err.MySQLError as e:
            raise self._query_error(e, sql) from None

    def _query_error(self, e, sql):
        """A broken link is a lost connection; a refused statement keeps its error."""
        code = e.args[0] if e.args else 0
        if isinstance(e, pymysql.err.InterfaceError) or (
                isinstance(e, pymysql.err.OperationalError) and code in _LINK_ERRORS):
            return ConnectionLost(f"lost the connection to {self.source.address} during "
                                  f"set-up ({sql.split()[0]} ...): {e.args[-1]}")
        if code == _UNKNOWN_VARIABLE:
            return e
        return SourceError(f"the source {self.source.address} refused {sql!r}: "
                           f"error {code}: {e.args[-1]}")

    def _variable(self, name):
        try:
            return self.query(f"SELECT @@{name}")[0][0]
        except pymysql.err.OperationalError:  # only error 1193 comes back raw
            return None

    def _read_server_info(self):
        version = self.query("SELECT VERSION()")[0][0]
        # only the primary side counts: a replica plugin alone sends no semi-sync header
        semi = {k: v for k, v in self.query("SHOW VARIABLES LIKE 'rpl_semi_sync_%enabled'")
                if k in ("rpl_semi_sync_master_enabled", "rpl_semi_sync_source_enabled")}
        return ServerInfo(version, int(self._variable("server_id")),
                          self._variable("server_uuid"), bool(int(self._variable("log_bin"))),
                          self._variable("binlog_checksum"), semi,
                          self._variable("binlog_storage_engine"))

    def binary_logs(self):
        """Names of the binlog files the source still has, oldest first."""
        return [row[0] for row in self.query("SHOW BINARY LOGS")]

    def _prepare_dump(self):
        """Session variables that shape the dump; decides semi-sync for this connection."""
        period = int(self.heartbeat * 1e9)
        self.query(f"SET @master_heartbeat_period = {period}")
        if self.info.checksum is not None:
            self.query("SET @master_binlog_checksum = @@global.binlog_checksum")
        if self.info.flavor == "mysql":  # MySQL 8.0.26+ names; harmless on older servers
            self.query(f"SET @source_heartbeat_period = {period}")
            if self.info.checksum is not None:
                self.query("SET @source_binlog_checksum = @@global.binlog_checksum")
        if self.info.flavor == "mariadb":
            self.query("SET @mariadb_slave_capability = 4")
        self.stream_checksum = (self.info.checksum or "NONE").upper() == "CRC32"
        self.semi_sync = bool(self.want_semi_sync and self.info.semi_sync_vars)
        if self.semi_sync:
            self.query("SET @rpl_semi_sync_slave = 1")
            if self.info.flavor == "mysql":
                self.query("SET @rpl_semi_sync_replica = 1")
        self._send(protocol.register_slave_payload(self.server_id, port=0))
        self._read_reply("COM_REGISTER_SLAVE")

    # -- dump ------------------------------------------------------------------------

    def start_dump(self, file, pos):
        """Start a blocking dump from ``file``:``pos`` (semi-sync when the source has it)."""
        self._prepare_dump()
        self._send(protocol.binlog_dump_payload(self.server_id, file, pos))
        self._new_decoder()
        self.position_hint = (file, pos)

    @property
    def silence_limit(self):
        """Seconds without a byte from a dumping source that mean the link is dead."""
        return max(3 * self.heartbeat, self.heartbeat + 5)

    def wait_started(self, timeout, stop=lambda: False):
        """True when the source sent the first bytes of the dump within ``timeout`` s."""
        deadline = time.monotonic() + timeout
        while not stop():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if self._wait_readable(min(left, POLL_SLICE)):
                return True
        return False

    def _wait_readable(self, timeout):
        sock = self.conn._sock
        if isinstance(sock, ssl.SSLSocket) and sock.pending():
            return True  # decrypted bytes wait inside the TLS layer, unseen by select
        try:  # poll, not select: select fails on a descriptor past 1024
            poller = select.poll()
            poller.register(sock, select.POLLIN)
            return bool(poller.poll(timeout * 1000))
        except (OSError, ValueError) as e:  # a socket shut down or closed meanwhile
            raise ConnectionLost(f"lost the connection to {self.source.address}: {e}") \
                from None

    def locate_gtid(self, gtids):
        """Name of the binlog file where the source would start streaming after ``gtids``."""
        self._prepare_dump()
        if isinstance(gtids, MariaGtidPos):
            self.query(f"SET @slave_connect_state = '{gtids}'")
            self.query("SET @slave_gtid_strict_mode = 1")
            self._send(protocol.binlog_dump_payload(self.server_id, "", 4))
        else:
            self._send(protocol.binlog_dump_gtid_payload(self.server_id, gtids))
        self._new_decoder()
        self.position_hint = (f"GTID {gtids}", 4)
        batch = []
        while not batch:  # [] only when nothing came yet (read_batch bounds the silence)
            batch = self.read_batch()
        for event, _ in protocol.split_batch(batch):
            if event[4] == ev.ROTATE:
                return ev.parse_rotate(event, self.stream_checksum)[1]
        raise SourceError("the source did not name a binlog file for that GTID position")

    def _new_decoder(self):
        self.decoder = protocol.StreamDecoder(self.semi_sync, speedups.fused.squeeze_packets)
        self.buf = bytearray(BUFFER_SIZE)
        self.buf_start = self.buf_end = 0
        self.conn._sock.settimeout(self.silence_limit)
        self.last_bytes = time.monotonic()

    def read_batch(self, timeout=None):
        """Wait for events (at most ``timeout`` seconds, and never more than POLL_SLICE
        so that the caller sees a stop request), then take everything waiting.

        Returns all complete (event, needs_ack) pairs, or [] when the wait ended
        first: one batch is written and fsynced once, so taking what is queued
        groups more transactions per ACK, up to about BATCH_BYTES. A source silent
        for ``silence_limit`` seconds (heartbeats included) is a dead link:
        ConnectionLost.
        """
        self._compact()
        wait = POLL_SLICE if timeout is None else min(timeout, POLL_SLICE)
        if not self._wait_readable(wait):
            silent = time.monotonic() - self.last_bytes
            if silent > self.silence_limit:
                raise ConnectionLost(f"the source {self.source.address} sent nothing for "
                                     f"{silent:.0f}s (no event, no heartbeat): dead link")
            return []
        self.received_at = time.perf_counter()
        batch, received, decoded = [], 0, self.decoder.events
        while not batch or (self.buf_end < BATCH_BYTES and self.readable()):
            received += self._read()
            events, self.buf_start = self._decode()
            batch += events
        self.metrics.received(received, self.decoder.events - decoded)
        return batch

    def _compact(self):
        """Move the unread tail to the front: the previous batch is written by now."""
        tail = self.buf_end - self.buf_start
        if self.buf_start:
            self.buf[:tail] = self.buf[self.buf_start:self.buf_end]
            self.buf_start, self.buf_end = 0, tail

    def _read(self):
        """Receive into the reusable buffer (grown only for an event larger than it)."""
        if self.buf_end == len(self.buf):
            bigger = bytearray(len(self.buf) * 2)
            bigger[:self.buf_end - self.buf_start] = self.buf[self.buf_start:self.buf_end]
            self.buf, self.buf_end, self.buf_start = bigger, self.buf_end - self.buf_start, 0
        try:
            n = self.conn._rfile.readinto1(memoryview(self.buf)[self.buf_end:])
        except (OSError, socket.timeout) as e:
            raise ConnectionLost(f"lost the connection to {self.source.address}: {e}") from None
        if not n:
            raise ConnectionLost(f"the source {self.source.address} closed the connection")
        self.buf_end += n
        self.last_bytes = time.monotonic()
        return n

    def _decode(self):
        try:
            return self.decoder.decode(memoryview(self.buf), self.buf_start, self.buf_end)
        except protocol.ServerError as e:
            raise self._dump_error(e) from None
        except protocol.EndOfStream:
            raise ConnectionLost("the source ended the binlog dump") from None

    def readable(self):
        """True when bytes from the source are waiting to be read right now."""
        return self._wait_readable(0)

    def idle(self):
        """True when nothing more is waiting: a good moment to fsync."""
        return self.buf_start == self.buf_end and not self.decoder.partial \
            and not self.readable()

    def _dump_error(self, e):
        file, pos = self.position_hint
        if e.code == protocol.ER_MASTER_FATAL_ERROR_READING_BINLOG:
            return ResyncRequired(f"the source cannot send the binlog from {file}:{pos} "
                                  f"(error 1236: {e.message}); the binlogs may have been "
                                  f"purged: take a new full backup", file, pos)
        return ConnectionLost(f"the source stopped the dump: error {e.code}: {e.message}")

    def send_ack(self, file, pos):
        """Semi-sync ACK for ``file``:``pos`` (sequence id 0, no reply expected)."""
        try:
            self.conn._sock.sendall(protocol.frame(protocol.ack_payload(file, pos), 0))
        except OSError as e:
            raise ConnectionLost(f"cannot send the semi-sync ACK: {e}") from None

    def _send(self, payload):
        self.conn._next_seq_id = 0
        try:
            self.conn._write_bytes(protocol.frame(payload, 0))
        except pymysql.err.MySQLError as e:
            raise ConnectionLost(f"lost the connection to {self.source.address}: "
                                 f"{e.args[-1]}") from None
        self.conn._next_seq_id = 1

    def _read_reply(self, what):
        """The OK packet answering a command; a broken link is a lost connection."""
        try:
            self.conn._read_packet()
        except pymysql.err.MySQLError as e:
            raise self._query_error(e, what) from None

    def close(self):
        """Close the connection without waiting for the server."""
        if self.conn is not None:
            try:
                self.conn._force_close()
            except Exception:  # closing a dead socket must never mask the real error
                pass
            self.conn = None


def nudge_ack_receiver(source, server_id, heartbeat):
    """Open a short semi-sync dump under another server_id; return it (close it later).

    MariaDB 10.11 can deadlock when a replica reconnects with the same server_id
    while its previous dump thread is being retired: that thread waits in
    ``Ack_receiver::remove_slave`` for the ACK receiver, which sleeps until some
    semi-sync replica registers, and the new dump waits for the old thread. A
    semi-sync dump under another server_id registers and wakes the receiver. It
    dumps from the current end of the binlog, so it streams nothing.
    """
    helper = ReplicaClient(source, NUDGE_SERVER_ID - server_id, True, heartbeat)
    helper.connect()
    file, pos = helper.query("SHOW MASTER STATUS")[0][:2]
    helper.start_dump(file, int(pos))
    return helper
