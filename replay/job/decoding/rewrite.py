"""--rewrite-db FROM:TO: rename schemas in row events and default schemas (pure).

Row events name their table in the TABLE_MAP event, which is rebuilt with the
new schema (size and CRC32 recomputed). Statements run under the rewritten
``USE``; like mysqlbinlog's option, names qualified inside SQL text are left as
they are. Filters (--database, --table) see the original names.
"""

import struct
from dataclasses import replace

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import UsageError


def rewrite_table_map(event, mapping, checksum):
    """The TABLE_MAP event with its schema renamed per ``mapping`` (or unchanged)."""
    body_start = ev.HEADER_LEN + 8  # table_id (6) + flags (2)
    db_len = event[body_start]
    db = bytes(event[body_start + 1:body_start + 1 + db_len]).decode("utf-8")
    if db not in mapping:
        return event
    new_db = mapping[db].encode("utf-8")
    if len(new_db) > 64:
        raise UsageError(f"--rewrite-db target {mapping[db]!r} is longer than 64 bytes")
    end = len(event) - (ev.CRC_LEN if checksum else 0)
    rest = bytes(event[body_start + 1 + db_len:end])  # the NUL after the schema, then the rest
    body = bytes(event[ev.HEADER_LEN:body_start]) + bytes([len(new_db)]) + new_db + rest
    size = ev.HEADER_LEN + len(body) + (ev.CRC_LEN if checksum else 0)
    header = bytes(event[:9]) + struct.pack("<I", size) + bytes(event[13:ev.HEADER_LEN])
    out = header + body
    return out + struct.pack("<I", ev.crc32(out)) if checksum else out


def rewrite_transaction(trx, mapping, checksum):
    """The transaction with its TABLE_MAP events renamed and the mapping kept for USE."""
    if not mapping:
        return trx
    events = [rewrite_table_map(e, mapping, checksum) if e[4] == ev.TABLE_MAP else e
              for e in trx.events]
    return replace(trx, events=events, db_map=mapping)
