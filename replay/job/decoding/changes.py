"""One transaction's row events -> row changes for a change table (pure).

The rows are decoded by the ``mysql-replication`` package (pymysqlreplication),
which only reads from a live replication stream: each raw event is handed to
its ``BinLogPacketWrapper`` as the packet a stream would have read (an OK byte,
then the event), with a stand-in for the control connection that is never
queried. TABLE_MAP events fill a table map local to the transaction, as the
library's stream does, and the rows events after them are decoded against it.
Every event's CRC32 is checked again by the library (``_is_event_valid``).
MariaDB writes version 1 rows events (types 23-25), MySQL version 2 (30-32);
both decode alike (compressed events come here as the plain ones they hold: assemble).

Column names come from the TABLE_MAP optional metadata, which the source writes
only with ``binlog_row_metadata=FULL``; without them decoding stops with an
error naming the file, position and table. The primary key columns come from
the same metadata.

One change a row: ``op`` ('insert' | 'update' | 'delete'), ``db``, ``table``,
``pk`` (JSON of {column: value} for the primary key columns, from the after
image, the before image for a delete; None when the table has no primary key),
``before`` / ``after`` (JSON of the row images; None for an insert / a delete),
``gtid`` ('0-1-42'), ``commit_time`` (UTC datetime), ``file``, ``position``
(start offset of the rows event in its binlog file, from the event header's end
position minus its size) and ``row_index`` (the row's index within its event; the rows
events of one TRANSACTION_PAYLOAD share its position, and their rows are numbered on
across them).

The values' JSON: ``changejson``.

Rows undone by ROLLBACK TO SAVEPOINT are left out: a transaction's rows events after
a ``SAVEPOINT x`` up to a ``ROLLBACK TO x`` the binlog holds (it logs them only when the
transaction also changed a non-transactional table, whose rows go outside it) are
changes the source undid.

Statements are not row changes: DDL (and TRUNCATE) are left out of the change
table, and so is statement-based DML (binlog_format STATEMENT or MIXED): each one is
named in ``left_out`` (the caller's list, which the table's ``_SUCCESS`` records). What
the binlog never holds cannot be in the table either: rows a foreign key's ON DELETE
CASCADE / ON UPDATE CASCADE changed, on servers that log the statement's own rows only
(MariaDB, MySQL 8.x; MySQL 9.x logs them).
MySQL's PARTIAL_UPDATE_ROWS (binlog_row_value_options=PARTIAL_JSON: a JSON column's
after image may be a diff, not the document) is refused.
"""

import datetime
import re
from dataclasses import dataclass
from typing import NamedTuple

from pymysql.protocol import MysqlPacket
from pymysqlreplication import row_event
from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE
from pymysqlreplication.packet import BinLogPacketWrapper

from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import CorruptBinlog
from replay.job.decoding import changejson, rowdecode
from replay.job.decoding.changejson import (ChangeDecodeError, images, image_values, json_changes,
                                            key_json, number_rows, stored_image, to_json,
                                            utc)
from replay.job.decoding.rowloop import time2
from replay.job.decoding.mysqljson import json_text

PARTIAL_UPDATE_ROWS = 39  # MySQL: an update whose JSON columns may be diffs (PARTIAL_JSON)
OPS = {23: "insert", 30: "insert", 24: "update", 31: "update", 25: "delete", 32: "delete"}
_LIBRARY_EVENTS = frozenset({row_event.TableMapEvent, row_event.WriteRowsEvent,
                             row_event.UpdateRowsEvent, row_event.DeleteRowsEvent})
_DML = {"INSERT", "UPDATE", "DELETE", "REPLACE", "LOAD"}
_FIRST_WORD = re.compile(r"\s*(?:/\*.*?\*/\s*)*([A-Za-z]+)", re.S)


@dataclass(frozen=True)
class Reader:
    """How to hand one file's events to the library (from its format description)."""

    checksum: bool
    dbms: str                # 'mariadb' or 'mysql' (charset tables of the library)
    version: tuple
    post_header_lens: tuple

    @classmethod
    def of(cls, fde, checksum):
        """The reader of a file with this parsed format description."""
        dbms = "mariadb" if ev.is_mariadb_version(fde.server_version) else "mysql"
        return cls(checksum, dbms, ev.parse_version(fde.server_version),
                   tuple(fde.post_header_lens))


class _Control:
    """Stands in for the library's control connection; no query ever reaches it."""

    charset = "utf8mb4"

    def __init__(self, dbms):
        self.dbms = dbms

    def _get_dbms(self):
        return self.dbms


COLS_BITMAP = NONE_SOURCE.COLS_BITMAP  # a column not in a row image
TABLES_CACHED = 1024  # decoded TABLE_MAPs kept for the next transactions of a file


def iter_changes(trx, fde, checksum, left_out=None, tables=None, stored=False):
    """Yield one change dict per row of the transaction's rows events, in binlog order,
    less the rows a ROLLBACK TO SAVEPOINT undid (so the transaction's changes are held
    until its end). ``left_out``: a list that gets a dict (gtid, file, position,
    statement) for each statement-based DML statement, which is no row change.
    ``tables``: a dict kept across the transactions of one file (one format
    description), where a TABLE_MAP seen before is found decoded. ``stored``: each
    change also has ``"stored"``, a ``Stored`` (its images' values as the server holds
    them: the typed tables, ``replay.job.sinks.typed``)."""
    reader = Reader.of(fde, checksum)
    table_map, keys, at = {}, {}, [None, 0]  # position, rows numbered at it so far
    changes, savepoints = [], {}
    for i, event in enumerate(trx.events):
        etype = event[4]
        if etype == ev.TABLE_MAP:
            table_id, keys[table_id] = _cached_table(event, table_map, reader, trx, tables)
        elif etype in OPS:
            changes.extend(_event_changes(event, table_map, keys, reader, trx, at,
                                          _position(trx, i, event), stored))
        elif etype not in ev.EVENT_NAMES:
            raise ChangeDecodeError(
                f"{trx.file}:{_position(trx, i, event)}: an event of type {etype}, which "
                f"--parquet does not know (MariaDB 12.3's PARTIAL_ROW_DATA splits a row "
                f"event into such pieces): refused, never skipped")
        elif etype == PARTIAL_UPDATE_ROWS:
            raise ChangeDecodeError(
                f"{_where(trx, event)}: PARTIAL_UPDATE_ROWS event (the source logs JSON "
                f"updates as diffs: binlog_row_value_options=PARTIAL_JSON): --parquet cannot "
                f"rebuild the documents it changes; set binlog_row_value_options='' on the "
                f"source")
        elif etype in (ev.QUERY, ev.EXECUTE_LOAD_QUERY):
            _statement(event, fde, checksum, trx, changes, savepoints, left_out)
    yield from changes


_SAVEPOINT = re.compile(r"\s*SAVEPOINT\s+`?([^`]*)`?\s*$", re.I)
_ROLLBACK_TO = re.compile(r"\s*ROLLBACK\s+(?:WORK\s+)?TO\s+(?:SAVEPOINT\s+)?`?([^`]*)`?\s*$",
                          re.I)


def _statement(event, fde, checksum, trx, changes, savepoints, left_out):
    """A QUERY event inside a transaction: a savepoint set or rolled back to (the
    changes since then dropped), or statement-based DML (named in ``left_out``)."""
    sql = ev.parse_query(event, checksum, fde, max_sql=256).sql
    mark = _SAVEPOINT.match(sql)
    if mark:
        savepoints[mark.group(1)] = len(changes)
        return
    back = _ROLLBACK_TO.match(sql)
    if back and back.group(1) in savepoints:
        cut = savepoints[back.group(1)]
        del changes[cut:]
        for name in [n for n, at in savepoints.items() if at > cut]:
            del savepoints[name]  # set after it: gone with the rollback
        return
    match = _FIRST_WORD.match(sql)
    word = match.group(1).upper() if match else ""
    if word in _DML and left_out is not None:
        left_out.append({"gtid": trx.gtid, "file": trx.file,
                         "position": position_of(trx, event), "statement": word})


def _cached_table(event, table_map, reader, trx, tables):
    """(table id, primary key) of a TABLE_MAP, its table put in ``table_map``; decoded
    once per file where ``tables`` (a cache by the event's bytes) is given."""
    if tables is None:
        table = _table_map(event, table_map, reader, trx)
        return table.table_id, primary_key(table)
    key = bytes(event[ev.HEADER_LEN:len(event) - (ev.CRC_LEN if reader.checksum else 0)])
    known = tables.get(key)
    if known is None:
        table = _table_map(event, table_map, reader, trx)
        if len(tables) >= TABLES_CACHED:
            tables.clear()
        known = tables[key] = (table.table_id, table_map[table.table_id], primary_key(table))
    table_id, table, pk = known
    table_map[table_id] = table
    return table_id, pk


def _table_map(event, table_map, reader, trx):
    table = _library_event(event, table_map, reader, trx)
    if any(column.name is None for column in table.columns):
        raise ChangeDecodeError(
            f"{_where(trx, event)}: TABLE_MAP of {table.schema}.{table.table} carries no "
            f"column names: the source needs binlog_row_metadata=FULL for --parquet")
    return table


def decode_event(event, table_map, reader, trx):
    """The decoder's event object for one raw TABLE_MAP or rows event (what
    ``iter_changes`` reads; ``replay.job.decoding.rowtext`` writes its rows as comments),
    ``table_map`` filled as the library's stream fills it; ChangeDecodeError (or
    CorruptBinlog) naming the file and position when it does not decode."""
    return _library_event(event, table_map, reader, trx)


def _library_event(event, table_map, reader, trx):
    """The library's event object for one raw event, checked."""
    # A stream packet is the OK byte then the event. Without a checksum the library
    # still stops reading TABLE_MAP metadata 4 bytes before the end: pad 4 bytes.
    data = b"\x00" + bytes(event) + (b"" if reader.checksum else b"\x00" * ev.CRC_LEN)
    wrapper = _MySQLPacket if reader.dbms == "mysql" else BinLogPacketWrapper
    try:
        packet = wrapper(
            MysqlPacket(data, "utf8"), table_map, _Control(reader.dbms), reader.version,
            use_checksum=reader.checksum, allowed_events=_LIBRARY_EVENTS, only_tables=None,
            ignored_tables=None, only_schemas=None, ignored_schemas=None,
            freeze_schema=False, ignore_decode_errors=False,
            verify_checksum=reader.checksum, optional_meta_data=True, enable_logging=False,
            post_header_lengths=reader.post_header_lens)
    except Exception as e:  # noqa: BLE001 - any library failure is this event's
        raise _decode_error(trx, event, e) from None
    decoded = packet.event
    if decoded is None:  # a rows event whose table id no TABLE_MAP announced
        raise ChangeDecodeError(f"{_where(trx, event)}: {ev.event_name(event[4])} event for "
                                f"table id {int.from_bytes(event[19:25], 'little')} without "
                                f"a TABLE_MAP before it in its transaction")
    if decoded._is_event_valid is False:
        raise CorruptBinlog(f"CRC32 mismatch in {ev.event_name(event[4])} event",
                            trx.file, position_of(trx, event))
    return decoded


class _MySQLPacket(BinLogPacketWrapper):
    """The library's packet for a MySQL source: a JSON column (type 245) is read as the
    text MySQL prints for it (``replay.job.decoding.mysqljson``), not the library's guess."""

    def read_binary_json(self, size, is_partial):
        if is_partial:  # PARTIAL_UPDATE_ROWS never gets here (iter_changes refuses it)
            raise ValueError("partial JSON update")
        return json_text(self.read(self.read_uint_by_size(size)))


def primary_key(table):
    """Names of a TABLE_MAP's primary key columns, in key order ([] without one)."""
    meta = table.optional_metadata
    indexes = list(meta.simple_primary_key_list) or list(meta.primary_keys_with_prefix)
    return [table.columns[i].name for i in indexes]


def _position(trx, index, event):
    """The file offset of ``trx``'s event ``index``: where its stored event starts (the
    assembler's ``event_starts``), else from the header's end position (0 inside a
    transaction of MariaDB 11.4+: binlog_legacy_event_pos=OFF)."""
    return trx.event_starts[index] if trx.event_starts else event_position(event)


def _event_changes(event, table_map, keys, reader, trx, at, position, stored):
    """The changes of one rows event: their JSON straight from its bytes where
    ``json_changes`` writes them, else from its rows (``_changes``); with ``stored``,
    each also has its images as the server holds them (from its rows)."""
    table_id = int.from_bytes(event[ev.HEADER_LEN:ev.HEADER_LEN + 6], "little")
    table = table_map.get(table_id)
    found = None if table is None or REFERENCE_ONLY else json_changes(
        event, OPS[event[4]], table, keys.get(table_id, []), reader, trx, at, position)
    if found is not None and not stored:
        return found
    rows = decode_rows_event(event, table_map, reader, trx)
    if found is None:
        return _changes(rows, event, keys, trx, at, position, reader.dbms if stored else None)
    if len(found) != len(rows.rows):  # never: both read the same images
        raise ChangeDecodeError(f"{_where(trx, event)}: {len(found)} rows written, "
                                f"{len(rows.rows)} decoded")
    op = OPS[event[4]]
    for change, row in zip(found, rows.rows):  # a table without a stored column (its spec)
        change["stored"] = Stored(rows, reader.dbms, *images(op, row, None, _present))
    return found


def _present(values, sources, _columns=None):
    """``stored_image`` of a row image of a table that ``json_changes`` writes (no column
    the server holds otherwise, no SET): the values, less those not in the image."""
    if not sources or COLS_BITMAP not in sources.values():
        return values
    return {name: value for name, value in values.items() if sources.get(name) != COLS_BITMAP}


def _changes(rows, event, keys, trx, at, position, dbms=None):
    op = OPS[event[4]]
    columns = {c.name: c for c in rows.columns}
    pk = keys.get(rows.table_id, [])
    json_image = rowdecode.twin(changejson.compiled, "json_image", image_values)
    commit_time = utc(trx.commit_ts)
    for index, row in enumerate(rows.rows, number_rows(at, position, len(rows.rows))):
        before, after = images(op, row, columns, json_image)
        change = {"op": op, "db": rows.schema, "table": rows.table,
                  "pk": key_json(pk, before, after), "before": to_json(before),
                  "after": to_json(after), "gtid": trx.gtid, "commit_time": commit_time,
                  "file": trx.file, "position": position, "row_index": index}
        if dbms is not None:
            change["stored"] = Stored(rows, dbms, *images(op, row, columns, stored_image))
        yield change


class Stored(NamedTuple):
    """A row change's images as the server holds the values (``stored_image``), and the
    rows event they came from (its TABLE_MAP's columns)."""

    rows: "DecodedRows"
    dbms: str
    before: dict
    after: dict


class DecodedRows(NamedTuple):
    """One rows event's rows (the library's shape: ``rowdecode``) and its table."""

    rows: list
    schema: str
    table: str
    table_id: int
    columns: list   # the library's columns of the TABLE_MAP


REFERENCE_ONLY = False  # True: every rows event through the library (tests compare)


def decode_rows_event(event, table_map, reader, trx, reference=None):
    """The rows of one raw rows event, its TABLE_MAP in ``table_map`` (decoded by
    ``decode_event``): read by ``rowdecode`` from the bytes, or by the library (the
    reference) for what ``rowdecode`` does not read or when ``reference`` (default
    ``REFERENCE_ONLY``) says so. ChangeDecodeError / CorruptBinlog name the file and
    position."""
    table_id = int.from_bytes(event[ev.HEADER_LEN:ev.HEADER_LEN + 6], "little")
    table = table_map.get(table_id)
    if table is not None and not (REFERENCE_ONLY if reference is None else reference):
        try:
            return _fast_rows(event, table, table_id, reader, trx)
        except rowdecode.Unsupported:
            pass
    rows_event = _library_event(event, table_map, reader, trx)
    try:
        rows = rows_event.rows
    except Exception as e:  # noqa: BLE001 - any library failure is this event's
        raise _decode_error(trx, event, e) from None
    if rows_event.packet.read_bytes != rows_event.event_size:
        raise ChangeDecodeError(f"{_where(trx, event)}: rows decoded to byte "
                                f"{rows_event.packet.read_bytes} of {rows_event.event_size}")
    _mend_timestamps(rows, rows_event.columns)
    return DecodedRows(rows, rows_event.schema, rows_event.table, rows_event.table_id,
                       rows_event.columns)


_WRAP = datetime.timedelta(seconds=1 << 32)
_EPOCH = datetime.datetime(1970, 1, 1)


def _mend_timestamps(rows, columns):
    """The library reads a TIMESTAMP's 4 bytes as signed: a value past 2038-01-19 (MariaDB
    11.5+ stores them up to 2106) comes back before 1970, where no TIMESTAMP lies; put
    it back where the server wrote it."""
    names = [c.name for c in columns if c.type == FIELD_TYPE.TIMESTAMP2]
    if not names:
        return
    for row in rows:
        for image in ("values", "before_values", "after_values"):
            values = row.get(image)
            for name in names if values else ():
                value = values.get(name)
                if value is not None and value < _EPOCH:
                    values[name] = value + _WRAP


def _fast_rows(event, table, table_id, reader, trx):
    plan = rowdecode.kept_plan(table, reader.dbms)
    if reader.checksum and not rowdecode.crc_ok(event):
        raise CorruptBinlog(f"CRC32 mismatch in {ev.event_name(event[4])} event",
                            trx.file, position_of(trx, event))
    try:
        rows = rowdecode.decode_rows(event, plan, reader.checksum,
                                     rowdecode.post_header(reader.post_header_lens, event[4]))
    except rowdecode.Unsupported:
        raise
    except Exception as e:  # noqa: BLE001 - any failure to read is this event's
        raise _decode_error(trx, event, e) from None
    return DecodedRows(rows, table.schema, table.table, table_id, table.columns)


def _read_time2(rows_event, column):
    """The library's TIME2 reader, mended (``time2``): it gets a negative value with a
    fraction wrong (-12:34:56.789012 read as -12:34:56.210988)."""
    return time2(rows_event.packet.read(3 + (column.fsp + 1) // 2), column.fsp)


# mysql-replication is pinned (setup.cfg): its private reader of TIME2 values is replaced
row_event.RowsEvent._RowsEvent__read_time2 = _read_time2


def event_position(event):
    """Start offset of an event in its file (its header holds where it ends); None when
    the header does not say."""
    end = ev.parse_header(event).log_pos
    return end - len(event) if end >= len(event) else None


def position_of(trx, event):
    """``_position`` of an event of ``trx`` known by itself (messages, rare events)."""
    index = next((i for i, e in enumerate(trx.events or ()) if e is event), None)
    return _position(trx, index, event) if index is not None else event_position(event)


def _where(trx, event):
    return f"{trx.file}:{position_of(trx, event)}"


def _decode_error(trx, event, error):
    return ChangeDecodeError(f"{_where(trx, event)}: cannot decode {ev.event_name(event[4])} "
                             f"event: {type(error).__name__}: {error}")
