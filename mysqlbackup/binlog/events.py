"""Binlog events as bytes: pure parsing, no I/O.

Covers binlog format v4 (MySQL 5.0+, every MariaDB): the 19-byte common header,
the format description event (server version, post-header lengths, checksum
algorithm), CRC32 verification and the bodies the backup needs to follow
positions, transactions and GTIDs. Row contents are not decoded here.
"""

import struct
import uuid
from collections import namedtuple

from mysqlbackup.errors import CorruptBinlog

try:  # the one CRC-32 of the project: zlib-ng's (SIMD, many times faster) when installed
    from zlib_ng.zlib_ng import crc32
except ImportError:  # pragma: no cover - the standard library computes the same value
    from zlib import crc32

MAGIC = b"\xfebin"
HEADER_LEN = 19
CRC_LEN = 4

# Event types (MySQL numbering; MariaDB's own start at 160).
UNKNOWN, START_V3, QUERY, STOP, ROTATE, INTVAR = 0, 1, 2, 3, 4, 5
APPEND_BLOCK, RAND, USER_VAR, FORMAT_DESCRIPTION, XID = 9, 13, 14, 15, 16
BEGIN_LOAD_QUERY, EXECUTE_LOAD_QUERY, TABLE_MAP = 17, 18, 19
INCIDENT, HEARTBEAT, IGNORABLE, ROWS_QUERY = 26, 27, 28, 29
GTID, ANONYMOUS_GTID, PREVIOUS_GTIDS = 33, 34, 35
XA_PREPARE, PARTIAL_UPDATE_ROWS = 38, 39
TRANSACTION_PAYLOAD, HEARTBEAT_V2, GTID_TAGGED = 40, 41, 42
MARIA_ANNOTATE_ROWS, MARIA_BINLOG_CHECKPOINT, MARIA_GTID, MARIA_GTID_LIST = 160, 161, 162, 163
MARIA_START_ENCRYPTION = 164

EVENT_NAMES = {
    0: "UNKNOWN", 1: "START_V3", 2: "QUERY", 3: "STOP", 4: "ROTATE", 5: "INTVAR",
    6: "LOAD", 7: "SLAVE", 8: "CREATE_FILE", 9: "APPEND_BLOCK", 10: "EXEC_LOAD",
    11: "DELETE_FILE", 12: "NEW_LOAD", 13: "RAND", 14: "USER_VAR",
    15: "FORMAT_DESCRIPTION", 16: "XID", 17: "BEGIN_LOAD_QUERY",
    18: "EXECUTE_LOAD_QUERY", 19: "TABLE_MAP", 20: "PRE_GA_WRITE_ROWS",
    21: "PRE_GA_UPDATE_ROWS", 22: "PRE_GA_DELETE_ROWS", 23: "WRITE_ROWS_V1",
    24: "UPDATE_ROWS_V1", 25: "DELETE_ROWS_V1", 26: "INCIDENT", 27: "HEARTBEAT",
    28: "IGNORABLE", 29: "ROWS_QUERY", 30: "WRITE_ROWS_V2", 31: "UPDATE_ROWS_V2",
    32: "DELETE_ROWS_V2", 33: "GTID", 34: "ANONYMOUS_GTID", 35: "PREVIOUS_GTIDS",
    36: "TRANSACTION_CONTEXT", 37: "VIEW_CHANGE", 38: "XA_PREPARE",
    39: "PARTIAL_UPDATE_ROWS", 40: "TRANSACTION_PAYLOAD", 41: "HEARTBEAT_V2",
    42: "GTID_TAGGED",
    160: "MARIA_ANNOTATE_ROWS", 161: "MARIA_BINLOG_CHECKPOINT", 162: "MARIA_GTID",
    163: "MARIA_GTID_LIST", 164: "MARIA_START_ENCRYPTION", 165: "MARIA_QUERY_COMPRESSED",
    166: "MARIA_WRITE_ROWS_COMPRESSED_V1", 167: "MARIA_UPDATE_ROWS_COMPRESSED_V1",
    168: "MARIA_DELETE_ROWS_COMPRESSED_V1", 169: "MARIA_WRITE_ROWS_COMPRESSED",
    170: "MARIA_UPDATE_ROWS_COMPRESSED", 171: "MARIA_DELETE_ROWS_COMPRESSED",
}

# Header flags.
LOG_EVENT_BINLOG_IN_USE_F = 0x01
LOG_EVENT_ARTIFICIAL_F = 0x20

# Checksum algorithms named in the format description event.
CHECKSUM_OFF, CHECKSUM_CRC32 = 0, 1

# MariaDB GTID event flags.
FL_STANDALONE, FL_GROUP_COMMIT_ID = 0x01, 0x02

INCIDENT_NAMES = {0: "NONE", 1: "LOST_EVENTS", 2: "COUNT"}

# Rows events: the statement-end flag closes a statement outside a transaction.
ROWS_EVENTS = frozenset({20, 21, 22, 23, 24, 25, 30, 31, 32, 39, 166, 167, 168, 169, 170, 171})
# The uncompressed v1/v2 rows events (WRITE/UPDATE/DELETE): what a BINLOG statement and
# the change table take as they are.
PLAIN_ROWS_EVENTS = frozenset({23, 24, 25, 30, 31, 32})
STMT_END_F = 0x0001

EventHeader = namedtuple("EventHeader", "timestamp type server_id size log_pos flags")
_HEADER = struct.Struct("<IBIIIH")


def event_name(type_code):
    """Human name of an event type code."""
    return EVENT_NAMES.get(type_code, f"TYPE_{type_code}")


def parse_header(buf, offset=0):
    """Parse the 19-byte common header at ``offset`` of ``buf``."""
    return EventHeader(*_HEADER.unpack_from(buf, offset))


def is_artificial(header):
    """True for events the server makes up while streaming (never in its files)."""
    return bool(header.flags & LOG_EVENT_ARTIFICIAL_F) or header.log_pos == 0


# CRC-32 of any bytes followed by their own CRC-32 (little-endian): a whole event whose
# trailing CRC is right has this CRC, so one pass checks it
CRC_RESIDUE = 0x2144DF1C


def crc_ok(event):
    """True when the trailing CRC32 of a whole event matches its bytes.

    A format description event's CRC is computed with the in-use flag cleared,
    so that flag is masked before checking.
    """
    stored = struct.unpack_from("<I", event, len(event) - CRC_LEN)[0]
    if event[4] == FORMAT_DESCRIPTION and event[17] & LOG_EVENT_BINLOG_IN_USE_F:
        head = bytes(event[:17]) + bytes([event[17] & ~LOG_EVENT_BINLOG_IN_USE_F & 0xFF])
        crc = crc32(event[18:len(event) - CRC_LEN], crc32(head))
    else:
        crc = crc32(memoryview(event)[:len(event) - CRC_LEN])
    return crc == stored


# --- format description -----------------------------------------------------

FormatDescription = namedtuple(
    "FormatDescription", "binlog_version server_version header_len post_header_lens checksum_alg"
)


def parse_version(text):
    """(major, minor, patch) of a server version string such as '5.6.4-m7-debug-log',
    '26.10.0' (MySQL's calendar versions), '12.3.2-MariaDB' or, as a MariaDB server
    announces itself to clients, '5.5.5-10.11.6-MariaDB' (10, 11, 6)."""
    if text.startswith("5.5.5-") and is_mariadb_version(text):
        text = text[len("5.5.5-"):]
    parts = []
    for piece in text.split("-")[0].split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts + [0] * (3 - len(parts)))


def is_mariadb_version(text):
    """True when the server version string is MariaDB's."""
    return "mariadb" in text.lower()


def _has_checksum_byte(server_version):
    """Servers from MySQL 5.6.1 / MariaDB 5.3 on append the checksum algorithm to the FDE."""
    version = parse_version(server_version)
    if is_mariadb_version(server_version):
        return version >= (5, 3, 0)
    return version >= (5, 6, 1)


def parse_format_description(event):
    """Parse a whole FORMAT_DESCRIPTION event (header included)."""
    body = memoryview(event)[HEADER_LEN:]
    if len(body) < 57:
        raise CorruptBinlog("format description event too short")
    binlog_version = struct.unpack_from("<H", body, 0)[0]
    server_version = bytes(body[2:52]).split(b"\0", 1)[0].decode("ascii", "replace")
    header_len = body[56]
    tail = body[57:]
    alg = None
    if _has_checksum_byte(server_version) and len(tail) >= 5:
        alg = tail[-5]
        tail = tail[:-5]
    return FormatDescription(binlog_version, server_version, header_len, bytes(tail), alg)


def packed_int(buf, pos):
    """(value, next position) of a packed (length-encoded) integer at ``pos``
    (``net_field_length``: one byte under 251, else 0xfc/0xfd/0xfe and 2, 3 or 8 bytes);
    ValueError when it is not one or runs past ``buf``."""
    first = buf[pos]
    if first < 251:
        return first, pos + 1
    width = {252: 2, 253: 3, 254: 8}.get(first)
    if width is None or pos + 1 + width > len(buf):
        raise ValueError(f"bad packed integer at byte {pos}")
    return int.from_bytes(bytes(buf[pos + 1:pos + 1 + width]), "little"), pos + 1 + width


def post_header_len(fde, type_code, default):
    """Post-header length of ``type_code`` as the FDE declares it (``default`` if absent)."""
    if fde is not None and 0 < type_code <= len(fde.post_header_lens):
        return fde.post_header_lens[type_code - 1]
    return default


def event_body(event, checksum):
    """The bytes after the common header, without the trailing CRC when there is one."""
    end = len(event) - (CRC_LEN if checksum else 0)
    return memoryview(event)[HEADER_LEN:end]


# --- bodies -------------------------------------------------------------------

def parse_rotate(event, checksum):
    """(position, next file name) of a ROTATE event."""
    body = event_body(event, checksum)
    pos = struct.unpack_from("<Q", body, 0)[0]
    return pos, bytes(body[8:]).decode("utf-8", "replace")


Query = namedtuple("Query", "db sql")


def query_parts(event, checksum, fde=None):
    """(body, status vars, schema, start of the statement) of a QUERY event (or an
    EXECUTE_LOAD_QUERY, a QUERY with a longer post-header), as views of its body; raise
    CorruptBinlog if the inner lengths overflow it."""
    body = event_body(event, checksum)
    phl = post_header_len(fde, event[4], 13 if event[4] == QUERY else 26)
    if len(body) < phl:
        raise CorruptBinlog(f"{event_name(event[4])} event shorter than its post-header")
    db_len = body[8]
    status_len = struct.unpack_from("<H", body, 11)[0] if phl >= 13 else 0
    db_start = phl + status_len
    sql_start = db_start + db_len + 1
    if sql_start > len(body):
        raise CorruptBinlog(
            f"QUERY event lengths overflow it (status vars {status_len}, schema {db_len}, "
            f"body {len(body)} bytes)")
    return body, body[phl:db_start], body[db_start:db_start + db_len], sql_start


def parse_query(event, checksum, fde=None, max_sql=None):
    """Schema and statement text of a QUERY event; raise CorruptBinlog if lengths overflow.

    ``max_sql`` limits how many bytes of the statement are decoded (enough to classify it).
    """
    body, _, db, sql_start = query_parts(event, checksum, fde)
    sql_end = len(body) if max_sql is None else min(len(body), sql_start + max_sql)
    sql = bytes(body[sql_start:sql_end]).decode("utf-8", "replace")
    return Query(bytes(db).decode("utf-8", "replace"), sql)


MariaGtid = namedtuple("MariaGtid", "domain server_id seq flags commit_id")


def parse_maria_gtid(event, checksum):
    """MariaDB GTID event: domain, server_id (from the header), seq_no, flags, commit id."""
    body = event_body(event, checksum)
    seq, domain, flags = struct.unpack_from("<QIB", body, 0)
    commit_id = None
    if flags & FL_GROUP_COMMIT_ID and len(body) >= 21:
        commit_id = struct.unpack_from("<Q", body, 13)[0]
    server_id = struct.unpack_from("<I", event, 5)[0]
    return MariaGtid(domain, server_id, seq, flags, commit_id)


def parse_maria_gtid_list(event, checksum):
    """List of (domain, server_id, seq_no) of a MariaDB GTID_LIST event."""
    body = event_body(event, checksum)
    count = struct.unpack_from("<I", body, 0)[0] & 0x0FFFFFFF
    if 4 + count * 16 > len(body):
        raise CorruptBinlog("GTID_LIST count overflows the event")
    return [struct.unpack_from("<IIQ", body, 4 + i * 16) for i in range(count)]


def parse_mysql_gtid(event, checksum):
    """(uuid string, gno) of a MySQL GTID or ANONYMOUS_GTID event."""
    body = event_body(event, checksum)
    sid = str(uuid.UUID(bytes=bytes(body[1:17])))
    gno = struct.unpack_from("<q", body, 17)[0]
    return sid, gno


GTID_FORMAT_TAGGED = 1


def parse_mysql_gtid_tagged(event, checksum):
    """(``uuid:tag``, gno) of a MySQL 8.3+ GTID_TAGGED event.

    Its body is a message of MySQL's serialization format: a version, the message's
    size and its last non-ignorable field id, then fields, each its id and its value
    (``_varlen`` unsigned, signed ones zigzag-coded): 0 flags, 1 the uuid (16 values, a
    byte each), 2 gno (signed), 3 the tag (a length, then its text), then the commit
    clock, timestamps and sizes, which are not needed here."""
    body = event_body(event, checksum)
    off, values = 0, {}
    try:
        for _ in range(3):  # version, size, last non-ignorable field id
            off += _varlen(body, off)[1]
        while off < len(body) and 3 not in values:
            field, size = _varlen(body, off)
            off += size
            if field == 1:
                raw = []
                for _ in range(16):
                    value, size = _varlen(body, off)
                    raw.append(value)
                    off += size
                values[1] = str(uuid.UUID(bytes=bytes(raw)))
            elif field == 3:
                length, size = _varlen(body, off)
                values[3] = bytes(body[off + size:off + size + length]).decode("ascii")
                off += size + length
            else:
                value, size = _varlen(body, off)
                values[field] = (value >> 1) ^ -(value & 1) if field == 2 else value
                off += size
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise CorruptBinlog(f"GTID_TAGGED event does not decode: {e}") from None
    if 1 not in values or 2 not in values:
        raise CorruptBinlog("GTID_TAGGED event without its uuid or gno")
    tag = values.get(3)
    return (f"{values[1]}:{tag}" if tag else values[1]), values[2]


def varlen_bytes(value):
    """The MySQL serialization variable-length form of an unsigned ``value``."""
    extra = 0
    while extra < 8 and value >= 1 << (7 * (extra + 1)):
        extra += 1
    if extra == 8:
        return b"\xff" + value.to_bytes(8, "little")
    raw = (value << (extra + 1)) | ((1 << extra) - 1)
    return raw.to_bytes(extra + 1, "little")


def parse_previous_gtids(event, checksum):
    """{uuid or 'uuid:tag': [(start, end_exclusive), ...]} of a PREVIOUS_GTIDS event.

    MySQL 8.3+ may write the tagged format: a format byte, 6 bytes of count, the
    format byte again, then per entry uuid + tag (length byte, text) + intervals.
    """
    body = event_body(event, checksum)
    tagged = len(body) >= 8 and body[0] == GTID_FORMAT_TAGGED == body[7]
    n_sids = (int.from_bytes(body[1:7], "little") if tagged
              else struct.unpack_from("<Q", body, 0)[0])
    off, result = 8, {}
    for _ in range(n_sids):
        if off + 24 + tagged > len(body):
            raise CorruptBinlog("PREVIOUS_GTIDS overflows the event")
        sid = str(uuid.UUID(bytes=bytes(body[off:off + 16])))
        off += 16
        if tagged:
            tag_len, size = _varlen(body, off)
            tag = bytes(body[off + size:off + size + tag_len]).decode("ascii", "replace")
            off += size + tag_len
            sid = f"{sid}:{tag}" if tag else sid
        n_iv = struct.unpack_from("<Q", body, off)[0]
        off += 8
        if off + 16 * n_iv > len(body):
            raise CorruptBinlog("PREVIOUS_GTIDS intervals overflow the event")
        result[sid] = [struct.unpack_from("<qq", body, off + 16 * i) for i in range(n_iv)]
        off += 16 * n_iv
    return result


def _rows_flags_at(event, fde):
    phl = post_header_len(fde, event[4], 8) if event[4] < 160 else 10
    return HEADER_LEN + (4 if phl == 6 else 6)


def rows_table_id(event, fde):
    """The table id a rows event applies to (its TABLE_MAP's)."""
    at = HEADER_LEN
    return int.from_bytes(event[at:_rows_flags_at(event, fde)], "little")


def rows_statement_end(event, fde):
    """True when a rows event carries STMT_END_F (the last rows event of its statement)."""
    return bool(struct.unpack_from("<H", event, _rows_flags_at(event, fde))[0] & STMT_END_F)


def with_statement_end(event, fde, checksum):
    """The rows event with STMT_END_F set (its CRC32 recomputed when it has one)."""
    at = _rows_flags_at(event, fde)
    flags = struct.unpack_from("<H", event, at)[0] | STMT_END_F
    out = bytes(event[:at]) + struct.pack("<H", flags) + bytes(event[at + 2:])
    if checksum:
        out = out[:-CRC_LEN] + struct.pack("<I", crc32(out[:-CRC_LEN]))
    return out


def _varlen(buf, off):
    """(value, byte count) of a MySQL serialization variable-length unsigned integer:
    the trailing one-bits of the first byte count the extra bytes."""
    first, extra = buf[off], 0
    while extra < 8 and first >> extra & 1:
        extra += 1
    if extra == 8:  # 0xff, then the value in 8 bytes
        return int.from_bytes(bytes(buf[off + 1:off + 9]), "little"), 9
    raw = int.from_bytes(bytes(buf[off:off + extra + 1]), "little")
    return raw >> (extra + 1), extra + 1


def parse_incident(event, checksum):
    """(incident number, name, message) of an INCIDENT event."""
    body = event_body(event, checksum)
    number = struct.unpack_from("<H", body, 0)[0]
    message = ""
    if len(body) > 2:
        length = body[2]
        message = bytes(body[3:3 + length]).decode("utf-8", "replace")
    return number, INCIDENT_NAMES.get(number, f"INCIDENT_{number}"), message
