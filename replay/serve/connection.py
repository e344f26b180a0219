"""One client connection of ``mysqlbackup serve``: handshake, commands, at most one dump.

Every read is bounded: the whole handshake must arrive within HANDSHAKE_TIMEOUT
(not per ``recv``: a client trickling a byte at a time gains nothing), each later
command within COMMAND_TIMEOUT, and a packet may not be larger than
MAX_LOGIN_PACKET before login or MAX_COMMAND_PACKET after it (its header is
checked before its body is read: 1153, as mariadbd answers a packet over
max_allowed_packet). A malformed packet gets mariadbd's answer to it (1043 "Bad
handshake", 1156 for packets out of order, 1105 for a short COM_REGISTER_SLAVE,
1236 for a short COM_BINLOG_DUMP); a login from an address with recent failures
waits the throttle's delay first (``limits``).

A connection talks to three things only: the served archive (``archive.ServedArchive``:
its facts, units, chunks, catalog, ``more_than``), the registry of connections
(``registry.Registry``: counts, log lines, logins, dumps, caching_sha2's cache) and
the read-only ``auth.Settings`` (the login, the dump's settings).
"""

import hmac
import logging
import random
import select
import socket
import threading
import time
from typing import NamedTuple

from mysqlbackup.errors import MysqlBackupError, mask_url
from mysqlbackup.source.protocol import BINLOG_DUMP_NON_BLOCK, BINLOG_SEND_ANNOTATE_ROWS_EVENT
from replay.serve.protocol import certs
from replay.serve.protocol import mysql as my
from replay.serve.protocol import packets as pk
from replay.serve.feed import (NO_CHECKSUM, NOT_IN_INDEX, DumpContext, DumpRefused, DumpStart,
                               dump_events)
from replay.serve.protocol.limits import COMMAND_TIMEOUT, HANDSHAKE_TIMEOUT
from replay.serve.mysqlfeed import MysqlWalk
from replay.serve.protocol.queries import Reply, Session, answer

log = logging.getLogger("replay.serve.server")

COM_QUIT, COM_INIT_DB, COM_QUERY, COM_PING = 0x01, 0x02, 0x03, 0x0E
COM_BINLOG_DUMP, COM_REGISTER_SLAVE, COM_BINLOG_DUMP_GTID = 0x12, 0x15, 0x1E
POLL_SLICE = 0.5          # longest wait, so that stop() is seen
SEND_TIMEOUT = 60.0       # a peer that takes no bytes for this long is gone
MAX_LOGIN_PACKET = 64 << 10     # a handshake response: user, auth data, connect attributes
MAX_COMMAND_PACKET = 1 << 20    # a replica's commands are a few hundred bytes
DRAIN_BYTES, DRAIN_SECONDS = 2 << 20, 0.5   # read after a refusal, before closing
SHOWN_USER = 128                # characters of a refused user name shown (as mariadbd)
REGISTER_TOO_SHORT = "Failed to register slave: too long 'report-host'"   # mariadbd's words


class Disconnected(Exception):
    """The peer closed the connection (or stop() did)."""


class TimedOut(Disconnected):
    """The peer did not send a whole packet in time."""


class PacketTooLarge(Exception):
    """A packet over the phase's limit: its announced size."""


class LoginAnswer(NamedTuple):
    """The client's HandshakeResponse, the plugin its ``token`` is of (after an auth
    switch, the one switched to) and the sequence id the server answers with."""

    response: object
    plugin: str
    token: bytes
    seq: int


class Connection:
    """One client connection, served by its own thread (``thread``); ``close()`` from
    any thread ends it. ``archive``: the ServedArchive; ``registry``: the Registry it
    is counted in; ``settings``: the auth.Settings of its login and dump."""

    def __init__(self, archive, registry, settings, sock, peer, conn_id):
        self.archive, self.registry, self.settings = archive, registry, settings
        self.sock, self.peer, self.id = sock, peer, conn_id
        self.session, self.buffer, self.closed = Session(), bytearray(), False
        self.replica_id, self.tls, self.logged_in = None, None, False
        self.heartbeat_v2 = False   # MySQL: the dump asked for HEARTBEAT_LOG_EVENT_V2
        self.ended = threading.Event()  # set by close(): ends a throttle's wait at once
        self.thread = threading.Thread(target=self.run, name=f"serve-conn-{conn_id}",
                                       daemon=True)

    def close(self):
        """End the connection (from any thread): its socket shut down, a wait ended."""
        self.closed = True
        self.ended.set()
        try:  # the socket's own shutdown, also under TLS (from another thread)
            socket.socket.shutdown(self.sock, socket.SHUT_RDWR)
        except OSError:
            pass

    def run(self):
        """The connection's thread: the login, then its commands, until it ends; every
        way it ends is logged (or counted) and it is forgotten by the registry."""
        where = f"{self.peer[0]}:{self.peer[1]}"
        try:
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if self._authenticate():
                self._commands()
        except TimedOut:
            self.registry.count("timed_out")
            self.registry.note("timeout", logging.INFO, "connection %d from %s: closed, no "
                               "whole packet in time (%s)", self.id, where,
                               "logged in" if self.logged_in else "handshake")
        except PacketTooLarge as e:
            self._too_large(where, e.args[0])
        except (Disconnected, OSError) as e:
            level = logging.INFO if self.logged_in else logging.DEBUG
            log.log(level, "connection %d from %s (replica server_id %s): disconnected%s",
                    self.id, where, self.replica_id,
                    "" if isinstance(e, Disconnected) else f": {e}")
        except Exception:  # noqa: BLE001 - one connection's bug must not stop the others
            log.exception("connection %d from %s failed", self.id, where)
        finally:
            self.sock.close()
            self.registry.forget(self)

    def _too_large(self, where, size):
        self.registry.count("too_large")
        self.registry.note("too-large", logging.WARNING, "connection %d from %s: closed, a "
                           "packet of %d bytes (%s)", self.id, where, size,
                           "logged in" if self.logged_in else "before login")
        try:
            self._send_now(pk.err_packet(pk.ER_NET_PACKET_TOO_LARGE, "Got a packet bigger "
                                         "than 'max_allowed_packet' bytes"),
                           1 if self.logged_in else 2)
            self._drain()
        except OSError:
            pass

    def _drain(self, limit=DRAIN_BYTES, seconds=DRAIN_SECONDS):
        """After a refusal: stop sending, then read and drop what the peer still sends
        (up to ``limit`` bytes or ``seconds``), so that closing does not reset the
        connection under the error packet it has not read yet."""
        socket.socket.shutdown(self.sock, socket.SHUT_WR)
        deadline, left = time.monotonic() + seconds, limit
        while left > 0:
            wait = deadline - time.monotonic()
            if wait <= 0:
                return
            self.sock.settimeout(wait)
            try:
                data = self.sock.recv(min(left, 1 << 16))
            except socket.timeout:
                return
            if not data:
                return
            left -= len(data)

    # -- packets -----------------------------------------------------------------------

    def _recv(self, n, deadline):
        """``n`` bytes by ``deadline`` (monotonic), never more taken from the socket: a
        client's TLS ClientHello may follow its SSL request at once, and is the TLS
        layer's to read. TimedOut past the deadline, however the bytes trickle in."""
        while len(self.buffer) < n:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimedOut()
            self.sock.settimeout(left)
            try:
                data = self.sock.recv(min(n - len(self.buffer), 1 << 20))
            except socket.timeout:
                raise TimedOut() from None
            if not data:
                raise Disconnected()
            self.buffer += data
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    def read_packet(self, deadline, limit):
        """(payload, sequence id) of the next packet (16 MiB pieces joined), whole by
        ``deadline`` (monotonic); PacketTooLarge past ``limit`` bytes, before reading them."""
        parts, total = [], 0
        while True:
            head = self._recv(4, deadline)
            size = head[0] | head[1] << 8 | head[2] << 16
            total += size
            if total > limit:
                raise PacketTooLarge(total)
            parts.append(self._recv(size, deadline))
            if size < pk.MAX_PAYLOAD:
                return b"".join(parts), head[3]

    def send(self, payloads, seq):
        """Send payloads with consecutive sequence ids from ``seq``; the next id."""
        out = []
        for payload in payloads:
            data, seq = pk.frames(payload, seq)
            out.append(data)
        self.sock.settimeout(SEND_TIMEOUT)
        self.sock.sendall(b"".join(out))
        return seq

    def _send_now(self, payload, seq):
        """One packet, at once, with a short timeout (a refusal: the peer may read
        nothing)."""
        self.sock.settimeout(1.0)
        self.sock.sendall(pk.frames(payload, seq)[0])

    # -- handshake ---------------------------------------------------------------------

    def _authenticate(self):
        ends = time.monotonic() + HANDSHAKE_TIMEOUT  # the whole handshake, TLS included
        scramble = bytes(random.SystemRandom().randrange(0x21, 0x7F) for _ in range(20))
        self.scramble = scramble  # a MariaDB login's OK proves the certificate with it
        mysql = self.archive.facts.flavor == "mysql"
        payload, seq = self._greet(scramble, ends, mysql)
        if seq != (2 if self.tls else 1):  # mariadbd: 1156, then closes
            self.registry.count("bad_handshakes")
            self._send_now(pk.err_packet(pk.ER_NET_PACKETS_OUT_OF_ORDER,
                                         "Got packets out of order"), seq + 1)
            return False
        try:
            login = self._login_answer(payload, seq, scramble, ends, mysql)
        except pk.MalformedPacket as e:
            return self._bad_handshake(e, seq + 1)
        if not self._throttled():
            return False
        if mysql:
            return self._mysql_login(login, scramble, ends)
        return self._check_login(login.response, login.token, scramble, login.seq)

    def _greet(self, scramble, ends, mysql):
        """Send the handshake (MariaDB's or mysqld's; CLIENT_SSL offered with a TLS
        context) and read the client's answer, over TLS when it asks for it first;
        (payload, sequence id)."""
        context = self.settings.tls_context
        hello = my.handshake_v10 if mysql else pk.handshake_v10
        self.send([hello(self.id & 0xFFFFFFFF, self.archive.facts.version, scramble,
                         ssl=context is not None)], 0)
        payload, seq = self.read_packet(ends, MAX_LOGIN_PACKET)
        if context is not None and pk.is_ssl_request(payload):
            payload, seq = self._start_tls(context, ends)
        return payload, seq

    def _login_answer(self, payload, seq, scramble, ends, mysql):
        """The LoginAnswer of the HandshakeResponse ``payload`` (sequence id ``seq``):
        a client whose plugin is not one this server takes is sent an auth switch
        request, and its new token read: MariaDB's to mysql_native_password, MySQL's to
        caching_sha2_password (unless it said caching_sha2 or mysql_native_password).
        MalformedPacket when the response does not parse."""
        response = pk.parse_handshake_response(payload)
        token, seq = response.auth, seq + 1
        wanted = my.CACHING_SHA2 if mysql else pk.NATIVE_PASSWORD
        plugin = response.plugin or wanted
        if plugin not in ((my.CACHING_SHA2, pk.NATIVE_PASSWORD) if mysql else (wanted,)):
            plugin = wanted
            self.send([my.auth_switch_request(plugin, scramble) if mysql
                       else pk.auth_switch_request(scramble)], seq)
            token, seq = self.read_packet(ends, MAX_LOGIN_PACKET)
            seq += 1
        return LoginAnswer(response, plugin, token, seq)

    def _bad_handshake(self, error, seq):
        self.registry.count("bad_handshakes")
        self.registry.note("bad-handshake", logging.WARNING, "connection %d from %s: bad "
                           "handshake: %s", self.id, self.peer[0], error)
        self.send([pk.err_packet(pk.ER_HANDSHAKE_ERROR, "Bad handshake")], seq)
        return False

    def _throttled(self):
        """Wait the delay the throttle gives this address (failed logins before); False
        when the connection ended meanwhile."""
        delay = self.registry.login_delay(self.peer[0])
        return not (delay and self.ended.wait(delay))

    def _check_login(self, response, token, scramble, seq):
        settings = self.settings
        if response.user == settings.user and pk.native_password_ok(
                settings.stored_hash, scramble, token):
            return self._accepted(response, token, seq, native=True)
        return self._denied(response, token, seq, "wrong user or password")

    def _accepted(self, response, token, seq, native=False):
        """The password was right: logged in, unless clear text is refused. A MariaDB
        login by mysql_native_password over TLS gets the certificate's proof in its OK
        (``certs.cert_proof``: what lets a MariaDB 11.4+ replica trust the certificate
        serve made itself)."""
        if self.tls or not self.settings.require_tls:
            proof = b""
            if native and self.tls and self.archive.facts.flavor != "mysql":
                proof = certs.cert_proof(self.settings.stored_hash, self.scramble,
                                         self.settings.tls_fingerprint)
            return self._logged_in(seq, proof)
        return self._denied(response, token, seq, "clear text refused "
                            "(--require-secure-transport), as for a user REQUIRE SSL")

    def _denied(self, response, token, seq, why):
        self.registry.login_failed(self.peer[0])
        user = response.user[:SHOWN_USER]
        self.registry.note("denied", logging.WARNING, "connection %d from %s: "
                           "access denied for user %r: %s", self.id, self.peer[0], user, why)
        self.send([pk.err_packet(pk.ER_ACCESS_DENIED, f"Access denied for user "
                                 f"'{user}'@'{self.peer[0]}' (using password: "
                                 f"{'YES' if token else 'NO'})")], seq)
        return False

    def _mysql_login(self, login, scramble, ends):
        """A MySQL client's login: ``caching_sha2_password`` (fast over the SHA-256
        scramble once the user logged in fully; else full authentication: the password
        in clear over TLS, or RSA-encrypted without, the public key sent on request)
        or ``mysql_native_password`` when the client answers with it; another plugin
        was switched to caching_sha2_password (``_login_answer``)."""
        response, token, seq, settings = login.response, login.token, login.seq, self.settings
        if login.plugin == pk.NATIVE_PASSWORD:
            return self._check_login(response, token, scramble, seq)
        if response.user != settings.user or not token:
            return self._denied(response, token, seq, "wrong user or password")
        if self.registry.sha2_cached(response.user):  # fast authentication
            if not my.sha2_token_ok(settings.password, scramble, token):
                return self._denied(response, token, seq, "wrong user or password")
            self.send([my.more_data(my.FAST_AUTH_OK)], seq)
            return self._accepted(response, token, seq + 1)
        self.send([my.more_data(my.PERFORM_FULL_AUTH)], seq)
        password, seq = self._full_password(scramble, seq, ends)
        if password is None or not hmac.compare_digest(password.encode("utf-8"),
                                                       settings.password.encode("utf-8")):
            return self._denied(response, token, seq + 1, "wrong user or password")
        self.registry.sha2_remember(response.user)
        return self._accepted(response, token, seq + 1)

    def _full_password(self, scramble, seq, ends):
        """caching_sha2_password's full authentication (after PERFORM_FULL_AUTH, sent
        with ``seq``): the password the client sends, in clear over TLS, else
        RSA-encrypted (the public key sent first when it asks); (the password or None,
        the sequence id of the client's last packet)."""
        answer, seq = self.read_packet(ends, MAX_LOGIN_PACKET)
        if self.tls:
            return my.clear_password(answer), seq
        if answer == b"\x02":  # the client asks for the public key
            self.send([my.more_data(my.public_pem(self.settings.rsa_key))], seq + 1)
            answer, seq = self.read_packet(ends, MAX_LOGIN_PACKET)
        return my.rsa_password(self.settings.rsa_key, answer, scramble), seq

    def _logged_in(self, seq, proof=b""):
        if not self.registry.logged_in(self):
            self.registry.note("too-many", logging.WARNING, "connection %d from %s: refused, "
                               "%d replicas connected (--max-connections)", self.id,
                               self.peer[0], self.settings.max_connections)
            self.send([pk.err_packet(pk.ER_CON_COUNT_ERROR, "Too many connections")], seq)
            return False
        self.logged_in = True
        self.send([pk.ok_packet(proof)], seq)
        return True

    def _start_tls(self, context, ends):
        """After the client's SSL request: the TLS handshake on this socket (within what
        is left of the handshake's time), then the real HandshakeResponse read over TLS,
        with its sequence id (the ids go on from the SSL request's, as with mariadbd:
        request 1, response 2, OK 3)."""
        left = ends - time.monotonic()
        if left <= 0:
            raise TimedOut()
        # wrapped first, handshaken after: close() from another thread (an eviction) must
        # reach the socket while the TLS handshake waits on the peer
        self.sock = context.wrap_socket(self.sock, server_side=True,
                                        do_handshake_on_connect=False)
        if self.closed:  # close() ran on the socket before it was wrapped
            raise Disconnected()
        self.sock.settimeout(left)
        try:
            self.sock.do_handshake()
        except socket.timeout:
            raise TimedOut() from None
        self.tls = self.sock.version()
        log.debug("connection %d from %s: %s, cipher %s", self.id, self.peer[0], self.tls,
                  self.sock.cipher()[0])
        return self.read_packet(ends, MAX_LOGIN_PACKET)

    # -- commands ----------------------------------------------------------------------

    def _commands(self):
        while not self.closed:
            payload, _ = self.read_packet(time.monotonic() + COMMAND_TIMEOUT,
                                          MAX_COMMAND_PACKET)
            if self._command(payload[0] if payload else None, payload):
                return

    def _command(self, command, payload):
        """Answer one command; True when the connection ends after it. A command cut
        short gets mariadbd's answer to it (a COM_REGISTER_SLAVE: 1105, the connection
        stays; a COM_BINLOG_DUMP: 1236, as for a file it lacks)."""
        if command == COM_QUIT:
            return True
        if command == COM_QUERY:
            self._query(payload[1:].decode("utf-8", "replace"))
        elif command in (COM_PING, COM_INIT_DB):
            self.send([pk.ok_packet()], 1)
        elif command == COM_REGISTER_SLAVE:
            try:
                self.replica_id = pk.parse_register_slave(payload)
            except pk.MalformedPacket:
                self.send([pk.err_packet(pk.ER_UNKNOWN_ERROR, REGISTER_TOO_SHORT)], 1)
                return False
            self.send([pk.ok_packet()], 1)
        elif command == COM_BINLOG_DUMP or (command == COM_BINLOG_DUMP_GTID
                                            and self.archive.facts.flavor == "mysql"):
            self._binlog_dump(command, payload)
            return True
        else:
            self.send([pk.err_packet(pk.ER_UNKNOWN_COM, "Unknown command")], 1)
        return False

    def _query(self, sql):
        """Answer COM_QUERY ``sql`` (``queries.answer``; an archive that cannot be read
        for it: 1105)."""
        try:
            reply = answer(sql, self.session, self.archive.facts)
        except MysqlBackupError as e:  # the archive could not be read for the answer
            self.registry.note("query", logging.WARNING, "connection %d: %r: %s", self.id,
                               sql[:200], mask_url(e))
            reply = Reply("error", code=pk.ER_UNKNOWN_ERROR,
                          message=f"mysqlbackup serve could not read the archive: "
                                  f"{mask_url(e)}"[:500])
        log.debug("connection %d: query %r: %s%s", self.id, sql[:200], reply.kind,
                  f" {reply.code}" if reply.kind == "error" else "")
        if reply.warning:
            self.registry.note("query", logging.WARNING, "connection %d: %s", self.id,
                               reply.warning)
        self.send(reply.payloads(), 1)

    def _binlog_dump(self, command, payload):
        """COM_BINLOG_DUMP (by file:position, or by the GTID state the session set), or
        MySQL's COM_BINLOG_DUMP_GTID: the dump, or 1236 for a request cut short."""
        if command == COM_BINLOG_DUMP:
            try:
                request = pk.parse_binlog_dump(payload)
            except pk.MalformedPacket:
                return self._refuse(pk.ER_MASTER_FATAL_READING_BINLOG, NOT_IN_INDEX,
                                    _Sender(self))
            return self._dump(request, DumpStart(request.file, request.pos,
                                                 self.session.connect_state))
        try:
            request = my.parse_binlog_dump_gtid(payload)
        except pk.MalformedPacket as e:
            return self._refuse(pk.ER_MASTER_FATAL_READING_BINLOG, f"Malformed "
                                f"COM_BINLOG_DUMP_GTID: {e}", _Sender(self))
        return self._dump(request, DumpStart(request.file, max(request.pos, 4), request.gtids))

    # -- the dump ----------------------------------------------------------------------

    def _dump(self, request, start):
        archive, session = self.archive, self.session
        self.replica_id = request.server_id
        self.registry.dump_started(self, request.server_id)
        log.info("connection %d: dump for server_id %d from %s", self.id, request.server_id,
                 f"GTID {start.gtids}" if start.gtids is not None
                 else f"{request.file or '(first file)'}:{request.pos}")
        out = _Sender(self, session.semi_sync)
        try:
            if archive.facts.checksum != "NONE" and not session.checksum_aware:
                raise DumpRefused(NO_CHECKSUM)
            end, follow = self._stream(request, start, out)
            while True:
                if request.flags & BINLOG_DUMP_NON_BLOCK:  # ends, as a server's does
                    return out.packet(pk.eof_packet())
                self._idle(end, out, self.settings.poll_interval if follow else None)
                if archive.more_than(end):
                    end, follow = self._stream(request, DumpStart(end.file, end.pos,
                                                                  epoch=end.epoch), out, end)
        except DumpRefused as e:
            self._refuse(e.code, e.message, out)
        except MysqlBackupError as e:
            self._refuse(pk.ER_MASTER_FATAL_READING_BINLOG, mask_url(str(e)), out)

    def _stream(self, request, start, out, previous=None):
        """Send what the archive holds from ``start`` to its end or the stop point;
        (EndInfo, True when the archive may still grow past it: no stop point met).
        ``previous``: the end of what was sent before (the dump resumes at it)."""
        archive, facts = self.archive, self.archive.facts
        try:
            _, units, cut = archive.units()
        except MysqlBackupError as e:
            if previous is None:
                raise
            # an upload in flight (a data object before its index): nothing sent yet
            log.warning("the archive grew but cannot be planned yet: %s", mask_url(e))
            return previous, True
        mysql = facts.flavor == "mysql"
        ctx = DumpContext(archive.chunks, self.settings.selection, facts.server_id,
                          facts.checksum == "CRC32",
                          "stop datetime reached" if cut else None,
                          mysql or bool(request.flags & BINLOG_SEND_ANNOTATE_ROWS_EVENT),
                          mysql and bool(request.flags & my.USE_HEARTBEAT_EVENT_V2),
                          # a resumed dump's fake ROTATE: as the events before it
                          self.session.rotate_checksum if previous is None else None,
                          archive.catalog)
        self.heartbeat_v2 = ctx.heartbeat_v2
        for kind, value in dump_events(units, start, ctx, resume=previous is not None,
                                       walk_class=MysqlWalk if mysql else None):
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
            self.registry.dump_ended(value)
            return value, value.reason == "end of the archive"
        raise AssertionError("dump_events ends with an 'end' item")

    def _refuse(self, code, message, out):
        log.warning("connection %d (server_id %s): dump refused: %s", self.id, self.replica_id,
                    message)
        self.registry.dump_failed(code, message)
        out.packet(pk.err_packet(code, message))

    def _idle(self, end, out, poll=None):
        """After the last transaction: heartbeats at the replica's period until it goes
        (Disconnected, also on stop()), or until ``poll`` seconds passed (None: never)."""
        period = self.session.heartbeat_ns / 1e9
        facts = self.archive.facts
        beat = my.heartbeat(end.file, end.pos, facts.server_id, facts.checksum == "CRC32",
                            self.heartbeat_v2)
        now = time.monotonic()
        due = now + period if period > 0 else None
        until = now + poll if poll else None
        poller = select.poll()  # not select(): a descriptor may be past 1024
        poller.register(self.sock, select.POLLIN)
        while not self.closed:
            now = time.monotonic()
            if until is not None and now >= until:
                return
            wait = min([POLL_SLICE] + [t - now for t in (due, until) if t is not None])
            readable = poller.poll(max(0.0, wait) * 1000)
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

    def __init__(self, conn, semi_sync=False):
        self.conn, self.semi_sync, self.seq = conn, semi_sync, 1
        self.pending, self.size = [], 0

    def event(self, event):
        """Gather one event's packet (sent once ``BATCH`` bytes are gathered)."""
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
        """Send what is gathered."""
        if self.pending:
            self.conn.sock.settimeout(SEND_TIMEOUT)
            self.conn.sock.sendall(b"".join(self.pending))
            self.pending, self.size = [], 0
