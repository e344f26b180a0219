"""One transaction's events -> what undoing it takes: its row changes checked for what an
undo can reverse, and the events that reverse them (pure).

``read_changes`` walks the transaction's plain events once, forward: every TABLE_MAP
parsed (``tablemap.parse_table_map``, ``rowcount.TableLayout``), every rows event kept
as a ``Step`` (its index and its TABLE_MAP's), and anything an undo cannot reverse
refused with ``UndoRefused`` naming the file and position: a statement that changes data
or schema by itself (DDL, TRUNCATE, statement-based DML and its context events), a
ROLLBACK TO SAVEPOINT, MySQL's PARTIAL_UPDATE_ROWS and the pre-5.1.18 rows events. The
columns a row image lacks are gathered per table (``Changes.missing``): the caller
refuses the undo unless the target says that each is generated (MariaDB 11's FULL images
leave virtual columns out); binlog_row_image MINIMAL or NOBLOB leave others out.

``reversed_event`` makes one rows event's reversal, byte for byte what
``mariadb-binlog --flashback`` makes of it: a WRITE_ROWS becomes a DELETE_ROWS of the
same rows and the other way round, an UPDATE_ROWS swaps each row's two images; its rows
in reverse order, STMT_END_F set (each reversal is a statement of its own, its TABLE_MAP
before it), MySQL's extra row data (partition ids) left out, the CRC32 made again. The
server applies it with ``BINLOG`` exactly as its replica applier would: every column type
round-trips, generated columns are the server's to compute. The caller applies the steps
newest first.
"""

import struct
import zlib
from dataclasses import dataclass

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.tablemap import parse_table_map
from mysqlbackup.binlog.transactions import is_control
from mysqlbackup.errors import ExitCode, MysqlBackupError
from replay.job.decoding.rowcount import TableLayout, table_id_size

STMT_END_F, NO_FOREIGN_KEY_CHECKS_F = 0x1, 0x2
REVERSED_TYPE = {23: 25, 25: 23, 24: 24, 30: 32, 32: 30, 31: 31}
KIND = {23: "insert", 30: "insert", 24: "update", 31: "update", 25: "delete", 32: "delete"}
UPDATES = frozenset({24, 31})
_V2 = frozenset({30, 31, 32})
_PARTIAL_UPDATE_ROWS = 39
_OLD_ROWS = frozenset({20, 21, 22})
_CONTEXT = frozenset({ev.INTVAR, ev.RAND, ev.USER_VAR, ev.BEGIN_LOAD_QUERY, ev.APPEND_BLOCK,
                      ev.EXECUTE_LOAD_QUERY})
_DML = ("INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD")
_U16 = struct.Struct("<H")
INSTEAD = "undo it with restore --table into another schema, then copy the rows back"


class UndoRefused(MysqlBackupError):
    """What the named transactions hold cannot be undone row by row (or the target's
    table is not one an undo can change safely); says why and what to do instead."""

    exit_code = ExitCode.USAGE


@dataclass(frozen=True)
class Step:
    """One rows event of the transaction: its index in the event list, its TABLE_MAP's,
    its table id, the change kind and its images' columns-present bitmaps."""

    index: int
    table_map: int
    table_id: int
    kind: str
    present: tuple


@dataclass
class Changes:
    """What ``read_changes`` found: the steps in binlog order, and per table id the
    TableMap and TableLayout of its (last) TABLE_MAP."""

    steps: list
    maps: dict       # table id -> TableMap
    layouts: dict    # table id -> TableLayout
    missing: dict = None  # table id -> bitmap of the columns some image lacks

    def tables(self):
        """'db.table' of every table the steps change, sorted."""
        return sorted({f"{self.maps[s.table_id].schema}.{self.maps[s.table_id].table}"
                       for s in self.steps})


def read_changes(events, fde, checksum, where):
    """The ``Changes`` of a transaction's plain ``events`` (a sequence: the spool), each
    checked; ``where(i)`` is 'FILE:POS' of event ``i`` for messages. UndoRefused for what
    an undo cannot reverse (see the module)."""
    changes = Changes([], {}, {}, {})
    current = {}  # table id -> index of its TABLE_MAP event
    for i, event in enumerate(events):
        etype = event[4]
        if etype == ev.TABLE_MAP:
            table = parse_table_map(event, checksum, fde)
            changes.maps[table.table_id] = table
            changes.layouts[table.table_id] = TableLayout.parse(event, fde, checksum)
            current[table.table_id] = i
        elif etype in KIND:
            table_id = _table_id(event, fde)
            if table_id not in current:
                raise UndoRefused(f"{where(i)}: a rows event for table id {table_id} without "
                                  "its TABLE_MAP before it in the transaction")
            layout = changes.layouts[table_id]
            if layout.unsupported:
                raise UndoRefused(f"{where(i)}: {layout.name} has a {layout.unsupported} that "
                                  f"undo cannot read; {INSTEAD}")
            present = _present(event, fde)
            whole = (1 << len(changes.maps[table_id].types)) - 1
            for bitmap in present:
                changes.missing[table_id] = changes.missing.get(table_id, 0) | (
                    whole & ~bitmap)
            changes.steps.append(Step(i, current[table_id], table_id, KIND[etype], present))
        else:
            _check_other(event, etype, fde, checksum, where(i))
    return changes


def _check_other(event, etype, fde, checksum, where):
    if etype == ev.QUERY:
        sql = ev.parse_query(event, checksum, fde, max_sql=200).sql
        head = sql.lstrip()[:24].upper()
        if not is_control(sql):
            kind = ("statement-based DML (binlog_format STATEMENT or MIXED: its rows are not "
                    "in the binlog)" if head.startswith(_DML) else "a DDL statement")
            raise UndoRefused(f"{where}: the transaction holds {kind}: "
                              f"{' '.join(sql.split())[:80]!r}; undo reverses row changes "
                              f"only: {INSTEAD}")
        if head.startswith("ROLLBACK TO") or head.startswith("ROLLBACK WORK TO"):
            raise UndoRefused(f"{where}: the transaction holds a ROLLBACK TO SAVEPOINT; "
                              f"undo does not reverse part of a transaction: {INSTEAD}")
    elif etype in _CONTEXT:
        raise UndoRefused(f"{where}: the transaction holds {ev.event_name(etype)}, which "
                          f"goes with statement-based DML: {INSTEAD}")
    elif etype == _PARTIAL_UPDATE_ROWS:
        raise UndoRefused(f"{where}: PARTIAL_UPDATE_ROWS (binlog_row_value_options="
                          f"PARTIAL_JSON: the JSON before images are not whole): {INSTEAD}")
    elif etype in _OLD_ROWS or etype not in ev.EVENT_NAMES:
        raise UndoRefused(f"{where}: an event of type {etype} that undo cannot reverse: "
                          f"{INSTEAD}")


def _table_id(event, fde):
    size = table_id_size(fde, event[4])
    return int.from_bytes(event[ev.HEADER_LEN:ev.HEADER_LEN + size], "little")


def _layout(event, fde):
    """(flags' offset, where the column count starts, the count, the bitmaps' width)."""
    etype = event[4]
    flags_at = ev.HEADER_LEN + table_id_size(fde, etype)
    pos = flags_at + 2
    if etype in _V2:
        pos += _U16.unpack_from(event, pos)[0]  # extra data, its own 2 bytes included
    count, after = ev.packed_int(event, pos)
    return flags_at, pos, count, after, (count + 7) // 8


def _present(event, fde):
    """The columns-present bitmap of each row image of a rows event (one, or an update's
    two)."""
    _, _, _, pos, width = _layout(event, fde)
    images = 2 if event[4] in UPDATES else 1
    return tuple(int.from_bytes(event[pos + n * width:pos + (n + 1) * width], "little")
                 for n in range(images))


def row_spans(event, layout, fde, checksum):
    """(where the rows start, [(start, middle, end)] of each row): ``middle`` is where an
    update's after image starts (``end`` for one image). ValueError when the images do not
    end exactly at the event's end."""
    _, _, _, pos, width = _layout(event, fde)
    present = _present(event, fde)
    images = len(present)
    start_rows = pos + images * width
    end = len(event) - (ev.CRC_LEN if checksum else 0)
    view, spans, at = memoryview(event), [], start_rows
    while at < end:
        start = at
        at = image_end(view, at, layout, present[0])
        middle = at
        if images == 2:
            at = image_end(view, at, layout, present[1])
        spans.append((start, middle if images == 2 else at, at))
    if at != end:
        raise ValueError("a row runs past the event's end")
    return start_rows, spans


def image_end(view, pos, layout, present):
    """Where the row image at ``pos`` (columns ``present``) ends."""
    nb = (bin(present).count("1") + 7) // 8
    nulls = int.from_bytes(view[pos:pos + nb], "little")
    steps, tail = layout.plan(present, nulls)
    pos += nb
    for skip, prefix in steps:
        pos += skip
        pos += prefix + int.from_bytes(view[pos:pos + prefix], "little")
    return pos + tail


def reversed_event(event, spans, rows_start, fde, checksum, server_id=None, flags=0):
    """The rows event that undoes ``event`` (see the module), its ``spans`` from
    ``row_spans``; ``server_id`` replaces the header's when given, ``flags`` are set
    besides STMT_END_F (NO_FOREIGN_KEY_CHECKS_F)."""
    etype = event[4]
    flags_at, count_at, _, bitmaps_at, width = _layout(event, fde)
    old_flags = _U16.unpack_from(event, flags_at)[0]
    new_flags = (old_flags | STMT_END_F | flags) & ~0x8  # COMPLETE_ROWS_F: not ours to say
    extra = _U16.pack(2) if etype in _V2 else b""
    bitmaps = bytes(event[bitmaps_at:rows_start])
    if etype in UPDATES:
        bitmaps = bitmaps[width:] + bitmaps[:width]
        rows = b"".join(bytes(event[m:e]) + bytes(event[s:m]) for s, m, e in reversed(spans))
    else:
        rows = b"".join(bytes(event[s:e]) for s, _, e in reversed(spans))
    body = (bytes(event[ev.HEADER_LEN:flags_at]) + _U16.pack(new_flags) + extra
            + bytes(event[count_at:bitmaps_at]) + bitmaps + rows)
    header = bytearray(event[:ev.HEADER_LEN])
    header[4] = REVERSED_TYPE[etype]
    return _sealed(header, body, checksum, server_id)


def with_server_id(event, checksum, server_id):
    """``event`` with the header's server id replaced (its CRC32 made again)."""
    end = len(event) - (ev.CRC_LEN if checksum else 0)
    return _sealed(bytearray(event[:ev.HEADER_LEN]), bytes(event[ev.HEADER_LEN:end]),
                   checksum, server_id)


def _sealed(header, body, checksum, server_id):
    if server_id is not None:
        header[5:9] = struct.pack("<I", server_id)
    size = len(header) + len(body) + (ev.CRC_LEN if checksum else 0)
    header[9:13] = struct.pack("<I", size)
    data = bytes(header) + body
    if checksum:
        data += struct.pack("<I", zlib.crc32(data))
    return data
