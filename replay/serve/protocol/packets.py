"""The primary's side of the client/server and replication protocol (pure, no I/O).

Payloads a MariaDB primary sends (handshake v10, OK, ERR, EOF, text result sets)
and the artificial events of a binlog dump (the fake ROTATE, the format description
resent with log_pos 0, the fake GTID_LIST, heartbeats), checked byte for byte
against what a MariaDB 10.11 primary sends its replica. Framing and the
replica-side payloads are ``mysqlbackup.source.protocol``'s.
"""

import hashlib
import hmac
import struct
from collections import namedtuple

from mysqlbackup.binlog import events as ev
from mysqlbackup.source.protocol import MAX_PAYLOAD, frame, lenenc_int

NATIVE_PASSWORD = "mysql_native_password"
SCRAMBLE_LEN = 20
SSL_REQUEST_LEN = 32
CHARSET_LATIN1 = 8
CHARSET_BINARY = 63
SERVER_STATUS_AUTOCOMMIT = 0x0002

# capabilities: protocol 4.1, secure connection, plugin auth (lenenc data), connect
# attributes, transactions, multi results; SSL only with a certificate (``ssl=True``);
# no compression, no DEPRECATE_EOF.
# Bit 0 (CLIENT_MYSQL / LONG_PASSWORD) is clear, as a MariaDB server leaves it.
CLIENT_CONNECT_WITH_DB = 0x00000008
CLIENT_PROTOCOL_41 = 0x00000200
CLIENT_SSL = 0x00000800
CLIENT_SECURE_CONNECTION = 0x00008000
CLIENT_PLUGIN_AUTH = 0x00080000
CLIENT_CONNECT_ATTRS = 0x00100000
CLIENT_PLUGIN_AUTH_LENENC = 0x00200000
SERVER_CAPABILITIES = (0x00000004 | CLIENT_CONNECT_WITH_DB | CLIENT_PROTOCOL_41 | 0x00002000
                       | CLIENT_SECURE_CONNECTION | 0x00010000 | 0x00020000 | 0x00040000
                       | CLIENT_PLUGIN_AUTH | CLIENT_CONNECT_ATTRS | CLIENT_PLUGIN_AUTH_LENENC)

# column types of the text result sets we send
TYPE_LONGLONG, TYPE_VAR_STRING = 0x08, 0xFD

# errors, with the SQLSTATE the server sends for each
ER_CON_COUNT_ERROR = 1040
ER_HANDSHAKE_ERROR = 1043
ER_ACCESS_DENIED = 1045
ER_UNKNOWN_COM = 1047
ER_UNKNOWN_SYSTEM_VARIABLE = 1193
ER_BAD_FIELD_ERROR = 1054
ER_PARSE_ERROR = 1064
ER_NOT_SUPPORTED = 1235
ER_UNKNOWN_ERROR = 1105
ER_NET_PACKET_TOO_LARGE = 1153
ER_NET_PACKETS_OUT_OF_ORDER = 1156
ER_MASTER_FATAL_READING_BINLOG = 1236
SQLSTATES = {ER_CON_COUNT_ERROR: "08004", ER_HANDSHAKE_ERROR: "08S01",
             ER_ACCESS_DENIED: "28000", ER_UNKNOWN_COM: "08S01",
             ER_NET_PACKET_TOO_LARGE: "08S01", ER_NET_PACKETS_OUT_OF_ORDER: "08S01",
             ER_BAD_FIELD_ERROR: "42S22", ER_PARSE_ERROR: "42000"}

# auth data a client may send: the largest plugin answer (an RSA-encrypted password of a
# 4096-bit key is 512 bytes); a user name is bounded by the packet's own limit
MAX_AUTH_BYTES = 1024


class MalformedPacket(ValueError):
    """A client's payload that does not parse: what it lacks or holds wrongly."""


HandshakeResponse = namedtuple("HandshakeResponse", "capabilities user auth database plugin")
DumpRequest = namedtuple("DumpRequest", "pos flags server_id file")
Column = namedtuple("Column", "name type")


# --- framing ----------------------------------------------------------------------

def frames(payload, seq):
    """(bytes of ``payload`` framed as one or more packets, next sequence id): a payload
    of 16 MiB or more goes in 0xFFFFFF-byte pieces, ended by a shorter (maybe empty)."""
    out, view = [], memoryview(payload)
    while True:
        piece = view[:MAX_PAYLOAD]
        out.append(frame(bytes(piece), seq))
        seq = (seq + 1) & 0xFF
        view = view[MAX_PAYLOAD:]
        if len(piece) < MAX_PAYLOAD:
            return b"".join(out), seq


# --- handshake and authentication -------------------------------------------------

def handshake_v10(connection_id, version, scramble, ssl=False):
    """The server's first packet: protocol 10, version, the 20-byte scramble, plugin;
    ``ssl``: CLIENT_SSL offered (the server has a certificate)."""
    if len(scramble) != SCRAMBLE_LEN:
        raise ValueError("the scramble is 20 bytes")
    caps = SERVER_CAPABILITIES | (CLIENT_SSL if ssl else 0)
    return (b"\x0a" + version.encode("ascii") + b"\0" + struct.pack("<I", connection_id)
            + scramble[:8] + b"\0" + struct.pack("<H", caps & 0xFFFF)
            + bytes([CHARSET_LATIN1]) + struct.pack("<H", SERVER_STATUS_AUTOCOMMIT)
            + struct.pack("<H", caps >> 16) + bytes([SCRAMBLE_LEN + 1]) + bytes(10)
            + scramble[8:] + b"\0" + NATIVE_PASSWORD.encode("ascii") + b"\0")


_LENENC_SIZES = {0xFC: 2, 0xFD: 3, 0xFE: 8}


def _cstring(buf, pos, what):
    end = buf.find(b"\0", pos)
    if end < 0:
        raise MalformedPacket(f"{what} is not terminated")
    return bytes(buf[pos:end]), end + 1


def _lenenc(buf, pos, what):
    """(value, next position) of a length-encoded integer; MalformedPacket when it is
    cut short or is NULL/ERR's marker (0xFB, 0xFF)."""
    if pos >= len(buf):
        raise MalformedPacket(f"{what} is missing")
    first = buf[pos]
    if first < 0xFB:
        return first, pos + 1
    size = _LENENC_SIZES.get(first)
    if size is None or pos + 1 + size > len(buf):
        raise MalformedPacket(f"{what} has a bad length")
    return int.from_bytes(buf[pos + 1:pos + 1 + size], "little"), pos + 1 + size


def is_ssl_request(payload):
    """True for the client's SSL request: the 32 bytes a HandshakeResponse41 starts
    with (capabilities with CLIENT_SSL, max packet, charset, filler), nothing more;
    the real response follows over TLS."""
    return len(payload) == SSL_REQUEST_LEN and bool(
        struct.unpack_from("<I", payload, 0)[0] & CLIENT_SSL)


def parse_handshake_response(payload):
    """HandshakeResponse of the client's Protocol::HandshakeResponse41; MalformedPacket
    (a ValueError) when it is not one (an SSL request, an old protocol, a field cut
    short, auth data over MAX_AUTH_BYTES)."""
    if len(payload) < 33:
        raise MalformedPacket("handshake response too short")
    caps = struct.unpack_from("<I", payload, 0)[0]
    if not caps & CLIENT_PROTOCOL_41:
        raise MalformedPacket("the client does not speak protocol 4.1")
    user, pos = _cstring(payload, 32, "the user name")
    if caps & CLIENT_PLUGIN_AUTH_LENENC:
        size, pos = _lenenc(payload, pos, "the auth data's length")
    elif caps & CLIENT_SECURE_CONNECTION:
        if pos >= len(payload):
            raise MalformedPacket("the auth data's length is missing")
        size, pos = payload[pos], pos + 1
    else:
        size = len(_cstring(payload, pos, "the auth data")[0])
    if size > MAX_AUTH_BYTES or pos + size > len(payload):
        raise MalformedPacket("the auth data is cut short or too long")
    auth = bytes(payload[pos:pos + size])
    pos += size
    database = plugin = b""
    if caps & CLIENT_CONNECT_WITH_DB and pos < len(payload):
        database, pos = _cstring(payload, pos, "the database name")
    if caps & CLIENT_PLUGIN_AUTH and pos < len(payload):
        plugin, pos = _cstring(payload, pos, "the auth plugin's name")
    return HandshakeResponse(caps, user.decode("utf-8", "replace"), auth,
                             database.decode("utf-8", "replace"),
                             plugin.decode("ascii", "replace"))


def auth_switch_request(scramble):
    """Ask the client to answer with mysql_native_password over ``scramble``."""
    return b"\xfe" + NATIVE_PASSWORD.encode("ascii") + b"\0" + scramble + b"\0"


def password_hash(password):
    """SHA1(SHA1(password)): what the server keeps of a mysql_native_password."""
    return hashlib.sha1(hashlib.sha1(password.encode("utf-8")).digest()).digest()


def native_token(password, scramble):
    """The client's answer: SHA1(password) XOR SHA1(scramble + SHA1(SHA1(password)))."""
    stage1 = hashlib.sha1(password.encode("utf-8")).digest()
    mask = hashlib.sha1(scramble + hashlib.sha1(stage1).digest()).digest()
    return bytes(a ^ b for a, b in zip(stage1, mask))


def native_password_ok(stored_hash, scramble, token):
    """True when ``token`` proves the password whose ``password_hash`` is stored."""
    if len(token) != SCRAMBLE_LEN:
        return False
    mask = hashlib.sha1(scramble + stored_hash).digest()
    stage1 = bytes(a ^ b for a, b in zip(token, mask))
    return hmac.compare_digest(hashlib.sha1(stage1).digest(), stored_hash)


# --- generic answers --------------------------------------------------------------

def ok_packet(info=b""):
    """OK: no rows affected, autocommit on, no warnings; ``info``: its message (the
    certificate proof of ``certs.cert_proof`` after a login)."""
    return (b"\x00\x00\x00" + struct.pack("<HH", SERVER_STATUS_AUTOCOMMIT, 0)
            + (_lenstr(info) if info else b""))


def eof_packet():
    return b"\xfe" + struct.pack("<HH", 0, SERVER_STATUS_AUTOCOMMIT)


def err_packet(code, message, sqlstate=None, before_handshake=False):
    """ERR with the SQLSTATE marker, as a 4.1 server sends it; ``before_handshake``:
    without it, as mariadbd sends an error in place of its handshake (1040)."""
    if before_handshake:
        return b"\xff" + struct.pack("<H", code) + message.encode("utf-8")
    state = sqlstate or SQLSTATES.get(code, "HY000")
    return (b"\xff" + struct.pack("<H", code) + b"#" + state.encode("ascii")
            + message.encode("utf-8"))


def _lenstr(value):
    data = value if isinstance(value, bytes) else str(value).encode("utf-8")
    return lenenc_int(len(data)) + data


def column_definition(column):
    """Protocol::ColumnDefinition41 of a computed column (no schema or table)."""
    charset, length = ((CHARSET_BINARY, 21) if column.type == TYPE_LONGLONG
                       else (CHARSET_LATIN1, 0xFFFFFF))
    return (_lenstr("def") + _lenstr("") + _lenstr("") + _lenstr("") + _lenstr(column.name)
            + _lenstr("") + b"\x0c" + struct.pack("<HIBHB", charset, length, column.type,
                                                  0, 0) + b"\0\0")


def result_set(columns, rows):
    """The payloads of a text result set: count, definitions, EOF, rows, EOF. A value
    None is SQL NULL."""
    out = [lenenc_int(len(columns))] + [column_definition(c) for c in columns]
    out.append(eof_packet())
    for row in rows:
        out.append(b"".join(b"\xfb" if v is None else _lenstr(v) for v in row))
    out.append(eof_packet())
    return out


# --- commands ---------------------------------------------------------------------

def parse_binlog_dump(payload):
    """DumpRequest of a COM_BINLOG_DUMP payload (command byte included);
    MalformedPacket when it is shorter than its fixed part (11 bytes)."""
    if len(payload) < 11:
        raise MalformedPacket("COM_BINLOG_DUMP too short")
    pos, flags, server_id = struct.unpack_from("<IHI", payload, 1)
    # a name of NULs (python-mysql-replication's MariaDB dump sends four) is empty: the
    # server reads it as a C string and starts at its first binlog file
    name = bytes(payload[11:]).split(b"\0", 1)[0]
    return DumpRequest(pos, flags, server_id, name.decode("utf-8", "replace"))


def parse_register_slave(payload):
    """The server_id a COM_REGISTER_SLAVE announces; MalformedPacket when it is
    shorter than its command byte and server_id."""
    if len(payload) < 5:
        raise MalformedPacket("COM_REGISTER_SLAVE too short")
    return struct.unpack_from("<I", payload, 1)[0]


# --- artificial events ------------------------------------------------------------

def make_event(etype, body, server_id, log_pos, checksum, flags=0, timestamp=0):
    """One event from its parts, with its CRC32 when ``checksum``."""
    size = ev.HEADER_LEN + len(body) + (ev.CRC_LEN if checksum else 0)
    raw = ev._HEADER.pack(timestamp, etype, server_id, size, log_pos, flags) + body
    if checksum:
        raw += struct.pack("<I", ev.crc32(raw))
    return raw


def fake_rotate(file, pos, server_id, checksum):
    """The ROTATE a primary sends first (and before each next file): artificial,
    timestamp 0, log_pos 0, naming the file and the position the dump goes on from."""
    return make_event(ev.ROTATE, struct.pack("<Q", pos) + file.encode("utf-8"), server_id,
                      0, checksum, ev.LOG_EVENT_ARTIFICIAL_F)


def heartbeat(file, pos, server_id, checksum):
    """A heartbeat: the current file and position, timestamp 0, flags 0."""
    return make_event(ev.HEARTBEAT, file.encode("utf-8"), server_id, pos, checksum)


def fake_gtid_list(gtids, log_pos, server_id, checksum):
    """The GTID_LIST a primary sends once a GTID dump has skipped what the replica
    holds: artificial, timestamp 0, at the position skipping ended."""
    items = sorted((d, s, n) for d, (s, n) in gtids.domains.items())
    body = struct.pack("<I", len(items)) + b"".join(struct.pack("<IIQ", *i) for i in items)
    return make_event(ev.MARIA_GTID_LIST, body, server_id, log_pos, checksum,
                      ev.LOG_EVENT_ARTIFICIAL_F)


CREATED_AT = ev.HEADER_LEN + 2 + 50   # the format description's 'created' timestamp


def without_in_use(event, checksum):
    """A format description as a server sends it, in every dump (mysqld 9.7 and mariadbd
    10.11 alike, seen with ``--raw``): LOG_EVENT_BINLOG_IN_USE_F cleared (the active
    file's has it), its CRC32 (computed with the flag clear) then its own."""
    if not event[17] & ev.LOG_EVENT_BINLOG_IN_USE_F:
        return event
    out = bytearray(event)
    out[17] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F & 0xFF
    if checksum:
        struct.pack_into("<I", out, len(out) - ev.CRC_LEN, ev.crc32(bytes(out[:-ev.CRC_LEN])))
    return bytes(out)


def resent_fde(event, clear_log_pos=True):
    """A file's format description event as a primary resends it at the start of a
    dump: 'created' 0 (the replica must not drop its temporary tables, as after a
    primary's restart), and log_pos 0 too for a dump from past offset 4 (the replica
    must not move its position); the CRC32 computed again when it has one (with the
    in-use flag cleared, as the server sums it: see ``without_in_use``). MariaDB
    10.11 clears 'created' for a dump by a non-empty GTID state (log_pos kept) and
    both past offset 4; a dump from a file's start gets the event as it is."""
    out = bytearray(event)
    if clear_log_pos:
        struct.pack_into("<I", out, 13, 0)
    struct.pack_into("<I", out, CREATED_AT, 0)
    if ev.parse_format_description(bytes(event)).checksum_alg == ev.CHECKSUM_CRC32:
        summed = bytearray(out[:-ev.CRC_LEN])
        summed[17] &= ~ev.LOG_EVENT_BINLOG_IN_USE_F & 0xFF  # as the server sums it
        struct.pack_into("<I", out, len(out) - ev.CRC_LEN, ev.crc32(bytes(summed)))
    return bytes(out)


def event_packet(event, semi_sync):
    """The payload carrying one event: the OK byte, the semi-sync header (never asking
    for an ACK) when the replica turned semi-sync on, the event."""
    return (b"\x00\xef\x00" if semi_sync else b"\x00") + bytes(event)
