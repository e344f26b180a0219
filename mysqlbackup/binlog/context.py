"""The events that carry a logged statement's context, parsed (pure).

A statement logged as such (binlog_format STATEMENT, or MIXED where it is safe) comes
with what it needs to give the source's values again: INTVAR (LAST_INSERT_ID and the
next AUTO_INCREMENT value), RAND (the seeds of RAND()), USER_VAR (a user variable the
statement reads), and for LOAD DATA the file's bytes (BEGIN_LOAD_QUERY, APPEND_BLOCK)
and the statement itself (EXECUTE_LOAD_QUERY, a QUERY event with the file's place in
its text). XA transactions name their XID in XA_PREPARE (both engines) and in
MariaDB's GTID event. Each parser takes a whole event (header included).
"""

import struct
from collections import namedtuple
from decimal import Decimal

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import CorruptBinlog

INTVAR_KINDS = {1: "LAST_INSERT_ID", 2: "INSERT_ID"}
# USER_VAR value types (Item_result)
STRING_RESULT, REAL_RESULT, INT_RESULT, DECIMAL_RESULT = 0, 1, 2, 4
UNSIGNED_F = 0x01
# EXECUTE_LOAD_QUERY's duplicate handling
LOAD_DUP_ERROR, LOAD_DUP_IGNORE, LOAD_DUP_REPLACE = 0, 1, 2
# MariaDB GTID event flags of XA transactions
FL_PREPARED_XA, FL_COMPLETED_XA = 0x40, 0x80

UserVar = namedtuple("UserVar", "name kind value charset unsigned")
ExecuteLoad = namedtuple("ExecuteLoad", "file_id start end dup")
Xid = namedtuple("Xid", "format_id gtrid bqual")


def parse_intvar(event, checksum):
    """(variable name, value) of an INTVAR event: LAST_INSERT_ID or INSERT_ID."""
    kind, value = struct.unpack_from("<BQ", ev.event_body(event, checksum), 0)
    return INTVAR_KINDS.get(kind, "INSERT_ID"), value


def parse_rand(event, checksum):
    """(seed1, seed2) of a RAND event."""
    return struct.unpack_from("<QQ", ev.event_body(event, checksum), 0)


def parse_user_var(event, checksum):
    """The UserVar of a USER_VAR event: ``kind`` one of "null", "string" (``value``
    bytes in ``charset``, a collation id), "real", "int", "decimal" (a Decimal)."""
    body = ev.event_body(event, checksum)
    try:
        n = struct.unpack_from("<I", body, 0)[0]
        name = bytes(body[4:4 + n]).decode("utf-8", "replace")
        pos = 4 + n
        if body[pos]:
            return UserVar(name, "null", None, None, False)
        kind, charset, length = struct.unpack_from("<BII", body, pos + 1)
        pos += 10
        raw = bytes(body[pos:pos + length])
        flags = body[pos + length] if len(body) > pos + length else 0
    except (struct.error, IndexError):
        raise CorruptBinlog("USER_VAR event shorter than its lengths say") from None
    unsigned = bool(flags & UNSIGNED_F)
    if kind == STRING_RESULT:
        return UserVar(name, "string", raw, charset, False)
    if kind == REAL_RESULT:
        return UserVar(name, "real", struct.unpack("<d", raw)[0], None, False)
    if kind == INT_RESULT:
        return UserVar(name, "int", int.from_bytes(raw[:8], "little", signed=not unsigned),
                       None, unsigned)
    if kind == DECIMAL_RESULT:
        return UserVar(name, "decimal", decimal_from_bin(raw[2:], raw[0], raw[1]), None,
                       False)
    raise CorruptBinlog(f"USER_VAR event of @{name}: unknown value type {kind}")


_DIG_BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)  # bytes that hold 0..9 leftover digits


def decimal_from_bin(data, precision, scale):
    """The Decimal a binary DECIMAL(precision, scale) value holds (MySQL's packing: the
    integer and fraction digits each in groups of 9 in 4 bytes, the leftover digits in
    fewer bytes, on the integer part's left and the fraction's right; the first bit set
    for a value >= 0, every bit flipped for a negative one)."""
    whole, lead, trail = precision - scale, (precision - scale) % 9, scale % 9
    groups = ([(_DIG_BYTES[lead], lead)] if lead else []) + [(4, 9)] * (whole // 9)
    frac_groups = [(4, 9)] * (scale // 9) + ([(_DIG_BYTES[trail], trail)] if trail else [])
    raw = bytearray(data[:sum(n for n, _ in groups + frac_groups)])
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytearray(b ^ 0xFF for b in raw)
    pos, texts = 0, []
    for size, digits in groups + frac_groups:
        texts.append(str(int.from_bytes(raw[pos:pos + size], "big")).zfill(digits))
        pos += size
    integer = "".join(texts[:len(groups)]).lstrip("0") or "0"
    fraction = "".join(texts[len(groups):])
    return Decimal(("-" if negative else "") + integer + ("." + fraction if fraction else ""))


def parse_load_block(event, checksum):
    """(file id, data) of a BEGIN_LOAD_QUERY or APPEND_BLOCK event."""
    body = ev.event_body(event, checksum)
    return struct.unpack_from("<I", body, 0)[0], bytes(body[4:])


def parse_execute_load(event, checksum):
    """The ExecuteLoad of an EXECUTE_LOAD_QUERY event: the id of the file its blocks
    carry, where its statement names the file (``start``..``end`` of the statement's
    text, the words ``LOCAL INFILE '...' [IGNORE|REPLACE] INTO`` included) and the
    duplicate handling."""
    body = ev.event_body(event, checksum)
    return ExecuteLoad(*struct.unpack_from("<IIIB", body, 13))


def parse_xa_prepare(event, checksum):
    """(one phase, Xid) of an XA_PREPARE event."""
    body = ev.event_body(event, checksum)
    one_phase, format_id, gtrid, bqual = struct.unpack_from("<BiII", body, 0)
    data = bytes(body[13:13 + gtrid + bqual])
    return bool(one_phase), Xid(format_id, data[:gtrid], data[gtrid:])


def maria_gtid_xid(event, checksum):
    """The Xid a MariaDB GTID event of an XA transaction names (None for another)."""
    body = ev.event_body(event, checksum)
    flags = body[12]
    if not flags & (FL_PREPARED_XA | FL_COMPLETED_XA):
        return None
    pos = 13 + (8 if flags & ev.FL_GROUP_COMMIT_ID else 0)
    format_id, gtrid, bqual = struct.unpack_from("<iBB", body, pos)
    data = bytes(body[pos + 6:pos + 6 + gtrid + bqual])
    return Xid(format_id, data[:gtrid], data[gtrid:])


def xid_sql(xid):
    """An Xid as XA statements take it: ``X'gtrid',X'bqual',format_id``."""
    return f"X'{xid.gtrid.hex().upper()}',X'{xid.bqual.hex().upper()}',{xid.format_id}"
