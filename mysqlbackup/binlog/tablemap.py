"""A TABLE_MAP event's table and columns (pure parsing, no I/O).

The body (MySQL's and MariaDB's alike): table id (6 bytes; 4 where the format
description gives the post-header 6 bytes), flags (2), then the schema and table names
(a length byte, the name, a NUL), the column count (packed), one type byte per column,
the type metadata (packed length, then bytes), the nullable bitmap, and, from MySQL 8.0.1
and MariaDB 10.5, the optional metadata: fields of type (1 byte), length (packed) and
value. ``binlog_row_metadata=FULL`` writes the column names (field 4) and the primary
key (8, 9); MINIMAL only signedness and character sets (1, 2, 3, 10, 11, 7); NO_LOG
(MariaDB's default) none.
"""

from dataclasses import dataclass

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import CorruptBinlog

COLUMN_NAME, SIMPLE_PRIMARY_KEY, PRIMARY_KEY_WITH_PREFIX = 4, 8, 9

# the bytes of type metadata a column of each binlog type has in a TABLE_MAP (0: none)
META_BYTES = {4: 1, 5: 1, 15: 2, 16: 2, 17: 1, 18: 1, 19: 1, 140: 1, 141: 2, 242: 1, 245: 1,
              246: 2, 247: 2, 248: 2, 249: 1, 250: 1, 251: 1, 252: 1, 253: 2, 254: 2, 255: 1}

# the binlog column types' SQL names (DATA_TYPE of INFORMATION_SCHEMA.COLUMNS), by type
# code; the binlog gives CHAR and VARCHAR both as 254/15 and every BLOB/TEXT as 252
DATA_TYPES = {0: "decimal", 1: "tinyint", 2: "smallint", 3: "int", 4: "float", 5: "double",
              7: "timestamp", 8: "bigint", 9: "mediumint", 10: "date", 11: "time",
              12: "datetime", 13: "year", 15: "varchar", 16: "bit", 17: "timestamp",
              18: "datetime", 19: "time", 245: "json", 246: "decimal", 247: "enum",
              248: "set", 249: "tinyblob", 250: "mediumblob", 251: "longblob", 252: "blob",
              253: "varchar", 254: "char", 255: "geometry"}


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
