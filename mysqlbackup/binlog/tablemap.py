"""A TABLE_MAP event's table and columns (pure parsing, no I/O).

The body (MySQL's and MariaDB's alike): table id (6 bytes; 4 where the format
description gives the post-header 6 bytes), flags (2), then the schema and table names
(a length byte, the name, a NUL), the column count (packed), one type byte per column,
the type metadata (packed length, then bytes), the nullable bitmap, and, from MySQL 8.0.1
and MariaDB 10.5, the optional metadata: fields of type (1 byte), length (packed) and
value. ``binlog_row_metadata=FULL`` writes the column names (field 4) and the primary
key (8, 9); MINIMAL only signedness and character sets (1, 2, 3, 10, 11, 7); NO_LOG
(MariaDB's default) none.

It is also the one table of the column types every reader uses (``ColumnType``, the
named codes; ``COLUMN_TYPES``: each one's metadata bytes, SQL name and fixed size;
``value_size``: a value's size in a row image; ``decimal_groups``: the one reader of a
packed DECIMAL) and the one parser of TABLE_MAPs (``parse_table_map``: the serve
catalog, undo and the row counter, ``replay.job.decoding.rowcount``).
"""

from dataclasses import dataclass
from enum import IntEnum
from typing import NamedTuple

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import CorruptBinlog

COLUMN_NAME, SIMPLE_PRIMARY_KEY, PRIMARY_KEY_WITH_PREFIX = 4, 8, 9

class ColumnType(IntEnum):
    """The binlog's column type codes (``enum_field_types``; 140 and 141 are MariaDB's
    compressed columns, 242 MySQL 9's VECTOR)."""

    DECIMAL = 0
    TINY = 1
    SHORT = 2
    LONG = 3
    FLOAT = 4
    DOUBLE = 5
    NULL = 6
    TIMESTAMP = 7
    LONGLONG = 8
    INT24 = 9
    DATE = 10
    TIME = 11
    DATETIME = 12
    YEAR = 13
    NEWDATE = 14
    VARCHAR = 15
    BIT = 16
    TIMESTAMP2 = 17
    DATETIME2 = 18
    TIME2 = 19
    BLOB_COMPRESSED = 140
    VARCHAR_COMPRESSED = 141
    VECTOR = 242
    JSON = 245
    NEWDECIMAL = 246
    ENUM = 247
    SET = 248
    TINY_BLOB = 249
    MEDIUM_BLOB = 250
    LONG_BLOB = 251
    BLOB = 252
    VAR_STRING = 253
    STRING = 254
    GEOMETRY = 255


class TypeFacts(NamedTuple):
    """What the binlog says of a column type: ``meta`` (bytes of type metadata it has in a
    TABLE_MAP), ``sql`` (its DATA_TYPE name; the binlog gives CHAR and VARCHAR both as
    254/15 and every BLOB/TEXT as 252), ``fixed`` (a value's size in a row image when it
    does not depend on the metadata, else None)."""

    meta: int
    sql: str
    fixed: int = None


_T = ColumnType
# every reader's one table of the column types (sizes follow the server's row format:
# ``log_event.cc``, ``field.cc``)
COLUMN_TYPES = {
    _T.DECIMAL: TypeFacts(0, "decimal"), _T.TINY: TypeFacts(0, "tinyint", 1),
    _T.SHORT: TypeFacts(0, "smallint", 2), _T.LONG: TypeFacts(0, "int", 4),
    _T.FLOAT: TypeFacts(1, "float", 4), _T.DOUBLE: TypeFacts(1, "double", 8),
    _T.NULL: TypeFacts(0, "null", 0), _T.TIMESTAMP: TypeFacts(0, "timestamp", 4),
    _T.LONGLONG: TypeFacts(0, "bigint", 8), _T.INT24: TypeFacts(0, "mediumint", 3),
    _T.DATE: TypeFacts(0, "date", 3), _T.TIME: TypeFacts(0, "time", 3),
    _T.DATETIME: TypeFacts(0, "datetime", 8), _T.YEAR: TypeFacts(0, "year", 1),
    _T.NEWDATE: TypeFacts(0, "date", 3), _T.VARCHAR: TypeFacts(2, "varchar"),
    _T.BIT: TypeFacts(2, "bit"), _T.TIMESTAMP2: TypeFacts(1, "timestamp"),
    _T.DATETIME2: TypeFacts(1, "datetime"), _T.TIME2: TypeFacts(1, "time"),
    _T.BLOB_COMPRESSED: TypeFacts(1, "blob"), _T.VARCHAR_COMPRESSED: TypeFacts(2, "varchar"),
    _T.VECTOR: TypeFacts(1, "vector"), _T.JSON: TypeFacts(1, "json"),
    _T.NEWDECIMAL: TypeFacts(2, "decimal"), _T.ENUM: TypeFacts(2, "enum"),
    _T.SET: TypeFacts(2, "set"), _T.TINY_BLOB: TypeFacts(1, "tinyblob"),
    _T.MEDIUM_BLOB: TypeFacts(1, "mediumblob"), _T.LONG_BLOB: TypeFacts(1, "longblob"),
    _T.BLOB: TypeFacts(1, "blob"), _T.VAR_STRING: TypeFacts(2, "varchar"),
    _T.STRING: TypeFacts(2, "char"), _T.GEOMETRY: TypeFacts(1, "geometry"),
}
# the bytes of type metadata a column of each binlog type has in a TABLE_MAP (0: none)
META_BYTES = {code: facts.meta for code, facts in COLUMN_TYPES.items() if facts.meta}
# the binlog column types' SQL names (DATA_TYPE of INFORMATION_SCHEMA.COLUMNS), by code
DATA_TYPES = {code: facts.sql for code, facts in COLUMN_TYPES.items()}
# the temporal types whose value is a base plus (fsp + 1) // 2 bytes of fraction
_FRACTIONAL = {_T.TIMESTAMP2: 4, _T.DATETIME2: 5, _T.TIME2: 3}
# length-prefixed values whose metadata is the prefix's size (1 to 4 bytes)
_PREFIXED = frozenset({_T.BLOB_COMPRESSED, _T.VECTOR, _T.JSON, _T.TINY_BLOB, _T.MEDIUM_BLOB,
                       _T.LONG_BLOB, _T.BLOB, _T.GEOMETRY})
# bytes of a packed DECIMAL's leftover digits (``dig2bytes``): 9 digits take 4 bytes
DIG2BYTES = (0, 1, 1, 2, 2, 3, 3, 4, 4, 4)


def decimal_size(precision, scale):
    """Bytes of a packed DECIMAL(precision, scale) (``decimal_bin_size``)."""
    whole = precision - scale
    return whole // 9 * 4 + DIG2BYTES[whole % 9] + scale // 9 * 4 + DIG2BYTES[scale % 9]


def decimal_groups(data, pos, precision, scale):
    """(negative, the whole part's digit groups, the fraction's, the position after) of
    the packed DECIMAL(precision, scale) at ``pos`` (``decimal2bin``'s layout: 9 digits
    in 4 big-endian bytes, the leftover ones in ``DIG2BYTES``, the sign in the first
    bit): each group its digits as text, zero-padded to their count (longer where its
    bytes hold more: damaged). The one reader of a packed DECIMAL (the row images' and
    MySQL's binary JSON's: ``replay.job.decoding.rowloop`` and ``mysqljson``; the
    compiled row loop has its twin); ValueError when the bytes run short."""
    size = decimal_size(precision, scale)
    raw = bytearray(data[pos:pos + size])
    if len(raw) != size or not size:
        raise ValueError(f"DECIMAL({precision},{scale}) shorter than its {size} bytes")
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        raw = bytes(b ^ 0xFF for b in raw)
    groups, at = [], 0
    for digits in decimal_digits(precision, scale):
        width = 4 if digits == 9 else DIG2BYTES[digits]
        groups.append(f"{int.from_bytes(raw[at:at + width], 'big'):0{digits}d}")
        at += width
    whole = precision - scale
    cut = (whole % 9 > 0) + whole // 9
    return negative, groups[:cut], groups[cut:], pos + size


def decimal_digits(precision, scale):
    """The digits each group of a packed DECIMAL(precision, scale) holds, in order: the
    whole part's leftover digits, its groups of 9, the fraction's groups of 9, its
    leftover digits."""
    whole = precision - scale
    return (([whole % 9] if whole % 9 else []) + [9] * (whole // 9) + [9] * (scale // 9)
            + ([scale % 9] if scale % 9 else []))


def value_size(ctype, meta):
    """(fixed size, length-prefix size) of a value of a column of type ``ctype`` with the
    type metadata ``meta`` in a row image, one of them 0; None for a type whose values
    cannot be sized (the pre-5.0 DECIMAL)."""
    facts = COLUMN_TYPES.get(ctype)
    if facts is not None and facts.fixed is not None:
        return facts.fixed, 0
    if ctype in (_T.VARCHAR, _T.VARCHAR_COMPRESSED):  # max length in meta
        return 0, 1 if int.from_bytes(meta[:2], "little") < 256 else 2
    if ctype in (_T.VAR_STRING, _T.STRING):  # real type and length packed in meta
        real, low = meta[0], meta[1]
        if real in (_T.ENUM, _T.SET):
            return low, 0
        return 0, 1 if (((real << 4) & 0x300) ^ 0x300) + low < 256 else 2
    if ctype in (_T.ENUM, _T.SET):
        return meta[1], 0
    if ctype == _T.BIT:  # leftover bits, whole bytes
        return meta[1] + (1 if meta[0] else 0), 0
    if ctype in _FRACTIONAL:
        return _FRACTIONAL[ctype] + (meta[0] + 1) // 2, 0
    if ctype == _T.NEWDECIMAL:
        return decimal_size(meta[0], meta[1]), 0
    if ctype in _PREFIXED:
        return (0, meta[0]) if 1 <= meta[0] <= 4 else None
    return None


@dataclass(frozen=True)
class TableMap:
    """What one TABLE_MAP says of its table: ``names`` None when the event carries no
    column names (the source's binlog_row_metadata was not FULL); ``metas`` each column's
    type metadata (bytes, ``META_BYTES`` of them; empty when a column type unknown
    there leaves them unread)."""

    table_id: int
    schema: str
    table: str
    types: bytes
    nullable: tuple
    names: tuple = None
    primary_key: tuple = ()
    has_optional: bool = False
    metas: tuple = ()

    @property
    def data_types(self):
        """The columns' SQL type names (DATA_TYPE) as far as the binlog types say."""
        return tuple(DATA_TYPES.get(t, "unknown") for t in self.types)


def table_of(event):
    """'db.table' named by a TABLE_MAP event (post-header: table_id 6, flags 2);
    CorruptBinlog when its lengths run past its end."""
    body = memoryview(event)[ev.HEADER_LEN + 8:]
    try:
        db_len = body[0]
        db = bytes(body[1:1 + db_len]).decode("utf-8", "replace")
        t_len = body[2 + db_len]
    except IndexError:
        raise CorruptBinlog("TABLE_MAP event shorter than its lengths say") from None
    table = bytes(body[3 + db_len:3 + db_len + t_len]).decode("utf-8", "replace")
    return f"{db}.{table}"


def parse_table_map(event, checksum, fde=None):
    """The TableMap of a TABLE_MAP event; CorruptBinlog when its body runs short."""
    body = bytes(ev.event_body(event, checksum))
    try:
        return _parse(body, ev.post_header_len(fde, ev.TABLE_MAP, 8))
    except (IndexError, ValueError, UnicodeDecodeError) as e:
        raise CorruptBinlog(f"a TABLE_MAP event that cannot be read: {e}") from None


def _parse(body, post_header):
    id_len = 4 if post_header == 6 else 6
    table_id = int.from_bytes(body[:id_len], "little")
    pos = post_header
    schema, pos = _name(body, pos)
    table, pos = _name(body, pos)
    count, pos = ev.packed_int(body, pos)
    types = body[pos:pos + count]
    pos += count
    meta_len, pos = ev.packed_int(body, pos)
    metas, at = [], pos
    for ctype in types:
        size = META_BYTES.get(ctype, 0)
        metas.append(bytes(body[at:at + size]))
        at += size
    if at != pos + meta_len:  # a type this table does not know: its metadata unknown
        metas = []
    pos += meta_len
    bitmap = body[pos:pos + (count + 7) // 8]
    if len(types) != count or len(bitmap) != (count + 7) // 8:
        raise ValueError("the column list runs past the event")
    pos += len(bitmap)
    nullable = tuple(bool(bitmap[i // 8] >> (i % 8) & 1) for i in range(count))
    fields = _optional(body, pos)
    names = _names(fields.get(COLUMN_NAME)) if COLUMN_NAME in fields else None
    if names is not None and len(names) != count:
        raise ValueError(f"{len(names)} column names for {count} columns")
    return TableMap(table_id, schema, table, types, nullable, names,
                    _primary_key(fields), bool(fields), tuple(metas))


def _name(body, pos):
    size = body[pos]
    return body[pos + 1:pos + 1 + size].decode("utf-8"), pos + 2 + size


def _optional(body, pos):
    fields = {}
    while pos < len(body):
        kind = body[pos]
        size, pos = ev.packed_int(body, pos + 1)
        if pos + size > len(body):
            raise ValueError("an optional metadata field runs past the event")
        fields[kind] = body[pos:pos + size]
        pos += size
    return fields


def _names(value):
    names, pos = [], 0
    while pos < len(value):
        size, pos = ev.packed_int(value, pos)
        names.append(value[pos:pos + size].decode("utf-8"))
        pos += size
    return tuple(names)


def _primary_key(fields):
    if SIMPLE_PRIMARY_KEY in fields:
        value, pos, key = fields[SIMPLE_PRIMARY_KEY], 0, []
        while pos < len(value):
            index, pos = ev.packed_int(value, pos)
            key.append(index)
        return tuple(key)
    if PRIMARY_KEY_WITH_PREFIX in fields:
        value, pos, key = fields[PRIMARY_KEY_WITH_PREFIX], 0, []
        while pos < len(value):
            index, pos = ev.packed_int(value, pos)
            _, pos = ev.packed_int(value, pos)  # the prefix length
            key.append(index)
        return tuple(key)
    return ()


def row_metadata(table_map, flavor):
    """The binlog_row_metadata setting a TABLE_MAP was written under: FULL when it names
    its columns; else MINIMAL where it has optional metadata (or on MySQL, whose
    MINIMAL writes none for a table without numeric or character columns); NO_LOG."""
    if table_map.names is not None:
        return "FULL"
    return "MINIMAL" if table_map.has_optional or flavor == "mysql" else "NO_LOG"
