"""One complete transaction of a binlog, as the replay carries it (pure).

``replay.job.decoding.assemble`` makes them; a Spark task sends them to the driver
without their bytes (``events`` None, ``event_lengths`` instead: see
``assemble.detach_events``), the driver gives the bytes back, chooses, filters,
rewrites and hands them to a sink. A module-level dataclass, so it pickles.

``rewrite_transaction`` is --rewrite-db FROM:TO: schemas renamed in row events and default
schemas. Row events name their table in the TABLE_MAP event, which is rebuilt with the
new schema (size and CRC32 recomputed). Statements run under the rewritten ``USE``; like
mysqlbinlog's option, names qualified inside SQL text are left as they are. Filters
(--database, --table) see the original names.
"""

import struct
from dataclasses import dataclass, field, replace

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.position import Position
from mysqlbackup.errors import UsageError


@dataclass
class Transaction:
    """A transaction: where it lies, its GTID, commit time, tables and raw events."""

    file: str
    start: int                 # offset of its first event
    end: int                   # offset just after its last event
    gtid: str = None           # '0-1-5' / 'uuid:5', None without a GTID
    gtid_parts: list = None    # [domain, server_id, seq] (MariaDB) / [uuid, gno] (MySQL)
    commit_ts: int = 0         # the commit event's timestamp (epoch seconds)
    tables: list = field(default_factory=list)   # 'db.table' of its TABLE_MAPs, sorted
    events: list = None        # raw events (bytes), None while detached
    db: str = None             # default schema of its first statement
    group: tuple = None        # commit group (replay.job.decoding.groups), None: runs alone
    rows_events: int = 0
    event_lengths: list = None  # while detached: the length of each event, in order
    db_map: dict = None        # --rewrite-db mapping its statements run under
    statements: bool = False   # holds a logged statement or its context (runs alone)
    event_starts: list = None  # with events: the file offset of the stored event each
    # came from (a compressed event's for the plain ones it holds)
    incident: str = None       # an INCIDENT marker (no transaction): what it says

    @property
    def gtid_key(self):
        """The GTID as a tuple (of ``gtid_parts``), or None."""
        return tuple(self.gtid_parts) if self.gtid_parts else None

    @property
    def maria_gtid(self):
        """(domain, server_id, seq) of a MariaDB GTID, else None."""
        parts = self.gtid_parts
        return tuple(parts) if parts and len(parts) == 3 and isinstance(parts[0], int) \
            else None

    @property
    def start_position(self):
        """Position of its first event."""
        return Position(self.file, self.start)

    @property
    def end_position(self):
        """Position just after its last event."""
        return Position(self.file, self.end)


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
