"""A transaction's rows events -> the rows as ``###`` comment lines, one line a row, for
``replay --sql`` (pure).

The shape is ``mysqlbinlog -v``'s, a row on one line::

    #Q> DELETE FROM shop.orders WHERE qty > 2
    ### DELETE FROM `shop`.`orders` WHERE `id`=1 `item`='pen' `qty`=3
    ### UPDATE `shop`.`orders` WHERE @1=2 @3=4 SET @1=2 @3=5
    ### INSERT INTO `shop`.`orders` SET @1=7 @2=NULL @3=1

``#Q>`` is the query the server annotated the rows with (MariaDB's ANNOTATE_ROWS,
MySQL's ROWS_QUERY), before the rows of its statement. Columns are named when the
TABLE_MAP carries their names (binlog_row_metadata=FULL), else ``@N`` (1-based); a
column missing from a row image (binlog_row_image=MINIMAL / NOBLOB) is left out, as
mysqlbinlog leaves it out. The values are decoded by ``changes`` (the ``mysql-replication``
package, MySQL JSON as MySQL prints it) and written as SQL literals:

- integers in decimal; where the TABLE_MAP does not say whether an integer column is
  unsigned, a negative value also as unsigned, as mysqlbinlog does: ``-1
  (18446744073709551615)``; DECIMAL in plain notation with its scale; DOUBLE
  ``repr``, FLOAT the shortest text that reads back as the same 4 bytes; YEAR an integer;
- strings quoted, ``\\`` ``'`` and newline, carriage return and tab escaped; a string
  holding any other control character, and bytes that are not UTF-8 (BLOB, BINARY,
  text whose character set the TABLE_MAP does not give), as ``X'hex'``;
- DATETIME ``'2026-11-26 10:00:00[.ffffff]'``, TIMESTAMP the same in UTC with
  ``+00:00``, DATE ``'2026-11-26'``, TIME ``'-12:30:00'``; a zero or invalid date
  (which the decoder does not return) ``'0000-00-00'`` / ``'0000-00-00 00:00:00'``;
- ENUM and SET their strings, or, when the TABLE_MAP does not carry the strings, the
  index and the bit mask as integers (as mysqlbinlog prints them); BIT ``b'101'``;
  JSON its text, quoted; NULL ``NULL``.

Bounded whatever a row holds: a value is cut after ``VALUE_CAP`` characters (its size
said after it: ``'abc...'... (20971520 bytes)``) and a row line after ``ROW_CAP``
(``... (N more values)``), so a 20 MB BLOB is a short line. An event that does not
decode (a column type the decoder lacks, such as MySQL 9's VECTOR) gets one line
saying so instead of its rows: the review file never fails for its comments.
"""

import datetime
import decimal
import json
import re
import struct

from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE

from mysqlbackup.binlog import events as ev
from mysqlbackup.speedups import load_twin
from replay.job.decoding import changes, rowdecode, rowloop
from replay.job.decoding.changejson import time_text
from replay.job.decoding.changes import (OPS, Reader, decode_event, decode_rows_event,
                                         position_of)
from replay.job.decoding.rowcount import table_id_size
from replay.job.decoding.sqltext import printable

# the version of the twins: ``_rowtext.TWIN`` must be the same (bump both on a change)
TWIN = 1
VALUE_CAP = 256      # characters of one value shown
ROW_CAP = 4096       # characters of one row line
QUERY_CAP = 4096     # characters of an annotated query shown
TABLES_CACHED = 1024  # decoded TABLE_MAPs kept for the next transactions
_TEXT_TYPES = {FIELD_TYPE.VARCHAR, FIELD_TYPE.VAR_STRING, FIELD_TYPE.STRING, FIELD_TYPE.BLOB,
               FIELD_TYPE.TINY_BLOB, FIELD_TYPE.MEDIUM_BLOB, FIELD_TYPE.LONG_BLOB}
_INTEGERS = {FIELD_TYPE.TINY: 1, FIELD_TYPE.SHORT: 2, FIELD_TYPE.INT24: 3, FIELD_TYPE.LONG: 4,
             FIELD_TYPE.LONGLONG: 8}
_TIMESTAMPS = {FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2}
_UNKNOWN_CHARSET = "binary"  # no Python codec has this name: the decoder keeps the bytes
_ESCAPES = {"\\": "\\\\", "'": "\\'", "\n": "\\n", "\r": "\\r", "\t": "\\t"}
_SPECIAL = re.compile(r"[\\'\n\r\t]")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]")
_ZERO = {NONE_SOURCE.OUT_OF_DATE_RANGE: "'0000-00-00'",
         NONE_SOURCE.OUT_OF_DATETIME_RANGE: "'0000-00-00 00:00:00'",
         NONE_SOURCE.OUT_OF_DATETIME2_RANGE: "'0000-00-00 00:00:00'"}


class _Ordinal(int):
    """An ENUM value whose string the TABLE_MAP does not carry: its index."""


class _Ordinals:
    """Stands in for an ENUM's strings: the decoder gets the index back."""

    def __getitem__(self, index):
        return _Ordinal(index)


class _Bit(int):
    """A SET member whose string the TABLE_MAP does not carry: its bit."""


class RowText:
    """The ``###`` lines of one transaction's rows events (``lines``), a BINLOG
    statement's events at a time, in order; ``trx`` gives the file and positions that
    errors name and its events the annotated queries. ``tables``: a dict kept across the
    transactions of one file (its format description), where a TABLE_MAP seen before is
    found decoded (decoding one costs more than the rows of a small transaction)."""

    def __init__(self, trx, fde, checksum, tables=None):
        self.trx, self.fde, self.checksum = trx, fde, checksum
        self.reader = Reader.of(fde, checksum)
        self.table_map, self.labels, self.unsigned_unknown, self.failed = {}, {}, {}, {}
        self.tables = {} if tables is None else tables
        self.queries = _queries(trx.events or (), checksum)

    def lines(self, events):
        """The comment lines (without newlines) for consecutive row events of the
        transaction (its own event objects, as ``transaction_steps`` cuts them)."""
        for piece in self._pieces(events):
            if type(piece) is bytes:
                yield from piece.decode("utf-8").split("\n")[:-1]
            else:
                yield piece

    def text(self, events):
        """The same lines as chunks of text, each chunk ending with a newline: str, or
        UTF-8 bytes for a rows event's lines (made at once: ``rows_text``)."""
        for piece in self._pieces(events):
            yield piece if type(piece) is bytes else piece + "\n"

    def _pieces(self, events):
        """A line (str), or a rows event's lines (bytes, ``rows_text``), at a time."""
        for event in events:
            query = self.queries.get(id(event))
            if query is not None:
                yield from query_lines(query)
            etype = event[4]
            if etype not in OPS and etype != ev.TABLE_MAP:
                continue
            size = table_id_size(self.fde, etype)
            table_id = int.from_bytes(event[ev.HEADER_LEN:ev.HEADER_LEN + size], "little")
            try:
                if etype == ev.TABLE_MAP:
                    self.failed.pop(table_id, None)
                    self._table(event)
                elif table_id in self.failed:
                    raise self.failed[table_id]
                else:
                    text = self._rows_text(event, table_id)
                    if text is None:
                        yield from self._rows(event)
                    elif text:
                        yield text
            except Exception as e:  # noqa: BLE001 - a comment never stops the review file
                if etype == ev.TABLE_MAP:  # said at each rows event of the table
                    self.failed[table_id] = e
                    continue
                yield (f"### {ev.event_name(etype)} event at {_where(self.trx, event)}: "
                       f"rows not shown ({printable(f'{type(e).__name__}: {e}')[:300]})")

    def _table(self, event):
        key = bytes(event[ev.HEADER_LEN:len(event) - (ev.CRC_LEN if self.checksum else 0)])
        known = self.tables.get(key)
        if known is None:
            known = self.tables[key] = self._decode_table(event)
            if len(self.tables) > TABLES_CACHED:
                self.tables.clear()
        table_id, table, labels, unknown = known
        self.table_map[table_id] = table
        self.labels[table_id], self.unsigned_unknown[table_id] = labels, unknown

    def _decode_table(self, event):
        """(table id, the decoder's table, {column: label}, integer columns of unknown
        signedness) of a TABLE_MAP event."""
        table = decode_event(event, self.table_map, self.reader, self.trx)
        meta = table.optional_metadata
        signed_known = bool(meta.unsigned_column_list)
        labels, unknown = [], set()
        for i, column in enumerate(table.columns):
            if column.name:
                labels.append(quote_name(column.name))
            else:
                column.name = f"@{i + 1}"
                labels.append(column.name)
            if column.type in _TEXT_TYPES and column.character_set_name is None:
                column.character_set_name = _UNKNOWN_CHARSET
            if column.type == FIELD_TYPE.ENUM and not column.enum_values:
                column.enum_values = _Ordinals()
            if column.type == FIELD_TYPE.SET and not column.set_values:
                column.set_values = [_Bit(1 << b) for b in range(8 * column.size)]
            if column.type in _INTEGERS and not signed_known:
                unknown.add(column.name)
        return (table.table_id, self.table_map[table.table_id],
                dict(zip((c.name for c in table.columns), labels)), unknown)

    def _rows_text(self, event, table_id):
        """The lines of a rows event at once (``rows_text``, or its compiled twin), or
        None: the event goes row by row through ``_rows`` (the reference decoder, a type
        the row loops do not read, a CRC mismatch, anything that fails: ``_rows`` says
        the same, or names the fault)."""
        table = self.table_map.get(table_id)
        if table is None or changes.REFERENCE_ONLY:
            return None
        try:
            spec = table.__dict__.get("_rowtext_spec")  # kept with the decoded TABLE_MAP
            if spec is None:
                spec = table.__dict__["_rowtext_spec"] = self._spec(table, table_id)
            plan, heads, labels, columns, unknown = spec
            if self.checksum and not rowdecode.crc_ok(event):
                return None
            data, pos, end, before, after = rowdecode.row_images(
                event, plan, self.checksum,
                rowdecode.post_header(self.reader.post_header_lens, event[4]))
            write = rowdecode.twin(compiled, "rows_text", rows_text)
            text, pos = write(data, pos, end, before, after, heads[OPS[event[4]]], labels,
                              columns, unknown)
        except Exception:  # noqa: BLE001 - _rows reads it again, and names what fails
            return None
        return text if pos == end else None

    def _spec(self, table, table_id):
        """(plan, heads by op, labels, columns, unsigned unknown) of a table, by column."""
        plan = rowdecode.kept_plan(table, self.reader.dbms)
        name = f"{quote_name(table.schema)}.{quote_name(table.table)}"
        heads = {"insert": (f"### INSERT INTO {name} SET",),
                 "delete": (f"### DELETE FROM {name} WHERE",),
                 "update": (f"### UPDATE {name} WHERE", "SET")}
        labels = self.labels.get(table_id, {})
        unknown = self.unsigned_unknown.get(table_id, set())
        names = [c.name for c in plan.columns]
        return (plan, heads, tuple(labels.get(n, n) for n in names), tuple(table.columns),
                tuple(n in unknown for n in names))

    def _rows(self, event):
        rows_event = decode_rows_event(event, self.table_map, self.reader, self.trx)
        rows = rows_event.rows
        labels = self.labels.get(rows_event.table_id, {})
        unknown = self.unsigned_unknown.get(rows_event.table_id, set())
        columns = {c.name: c for c in rows_event.columns}
        name = f"{quote_name(rows_event.schema)}.{quote_name(rows_event.table)}"
        op = OPS[event[4]]
        line = rowdecode.twin(compiled, "row_line", row_line)
        for row in rows:
            if op == "update":
                parts = [(f"### UPDATE {name} WHERE", row["before_values"],
                          row["before_none_sources"]),
                         ("SET", row["after_values"], row["after_none_sources"])]
            else:
                head = f"### INSERT INTO {name} SET" if op == "insert" else \
                    f"### DELETE FROM {name} WHERE"
                parts = [(head, row["values"], row["none_sources"])]
            yield line(parts, labels, columns, unknown)


def rows_text(data, pos, end, before, after, heads, labels, columns, unknown):
    """(the ``###`` lines of the row images of ``data`` from ``pos`` to ``end``, UTF-8
    bytes, each line ending with a newline; the position after them): ``row_line`` of
    each row the pure row loop reads (``rowloop.read_rows``: ``before`` and ``after``
    are its image plans). ``heads``: the line's head, and an update's ``SET``;
    ``labels``, ``columns`` (the decoder's) and ``unknown`` (integer signedness not
    known): one per column of the table. The compiled twin (``_rowtext.rows_text``)
    writes the same bytes without a value object for the common types."""
    rows, pos = rowloop.read_rows(data, pos, end, before, after)
    names = tuple(before[1])
    label_of, column_of = dict(zip(names, labels)), dict(zip(names, columns))
    unknown_names = {n for n, u in zip(names, unknown) if u}
    lines = []
    for row in rows:
        if after is not None:
            parts = [(heads[0], row["before_values"], row["before_none_sources"]),
                     (heads[1], row["after_values"], row["after_none_sources"])]
        else:
            parts = [(heads[0], row["values"], row["none_sources"])]
        lines.append(row_line(parts, label_of, column_of, unknown_names) + "\n")
    return "".join(lines).encode("utf-8"), pos


def _queries(events, checksum):
    """{id of a TABLE_MAP event: the annotated query before it} of a transaction."""
    found, pending = {}, None
    for event in events:
        etype = event[4]
        if etype in (ev.MARIA_ANNOTATE_ROWS, ev.ROWS_QUERY):
            body = ev.event_body(event, checksum)
            pending = bytes(body[1 if etype == ev.ROWS_QUERY else 0:][:QUERY_CAP * 4])
        elif etype == ev.TABLE_MAP and pending is not None:
            found[id(event)], pending = pending.decode("utf-8", "replace"), None
    return found


def query_lines(text):
    """``#Q> `` lines of an annotated query (its own lines kept, cut at QUERY_CAP)."""
    cut = text[:QUERY_CAP] + ("..." if len(text) > QUERY_CAP else "")
    return [f"#Q> {printable(line)}" for line in cut.replace("\r\n", "\n").split("\n")]


def row_line(parts, labels, columns, unsigned_unknown):
    """One row's line: each part (head, values, none sources) as ``head label=value``
    pairs; cut after ROW_CAP characters."""
    out, size, left = [], 0, sum(len(values) for _, values, _ in parts)
    for head, values, sources in parts:
        out.append(head)
        size += len(head) + 1
        for key, value in values.items():
            left -= 1
            if value is None:
                source = sources.get(key)
                if source == NONE_SOURCE.COLS_BITMAP:
                    continue  # not in this row image
                text = literal(None, columns.get(key), source)
            elif type(value) is int and key not in unsigned_unknown:
                text = str(value)
            elif type(value) is str and \
                    getattr(columns.get(key), "type", None) != FIELD_TYPE.BIT:
                text = _string_literal(value)
            else:
                text = literal(value, columns.get(key), None, key in unsigned_unknown)
            pair = f"{labels.get(key, key)}={text}"
            if size + len(pair) > ROW_CAP:
                out.append(f"... ({left + 1} more values)")
                return " ".join(out)
            out.append(pair)
            size += len(pair) + 1
    return " ".join(out)


def literal(value, column=None, source=None, unsigned_unknown=False):
    """A decoded column value as an SQL literal (the rules of the module docstring)."""
    ctype = getattr(column, "type", None)
    if type(value) is str and ctype != FIELD_TYPE.BIT:  # the common cases first
        return _string_literal(value)
    if type(value) is int and not unsigned_unknown:
        return str(value)
    if value is None:
        if source == NONE_SOURCE.EMPTY_SET:
            return "''"
        return _ZERO.get(source, "NULL")
    if isinstance(value, (_Ordinal, bool)):
        return str(int(value))
    if isinstance(value, int):
        if unsigned_unknown and value < 0 and ctype in _INTEGERS:
            return f"{value} ({value + (1 << (8 * _INTEGERS[ctype]))})"
        return str(value)
    if isinstance(value, float):
        return _float32(value) if ctype == FIELD_TYPE.FLOAT else repr(value)
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, (set, frozenset)):
        return _set_literal(value, column)
    if isinstance(value, datetime.datetime):
        zone = "+00:00" if ctype in _TIMESTAMPS else ""
        return f"'{value.isoformat(' ')}{zone}'"
    if isinstance(value, datetime.date):
        return f"'{value.isoformat()}'"
    if isinstance(value, datetime.timedelta):
        return f"'{time_text(value)}'"
    if ctype == FIELD_TYPE.BIT and isinstance(value, str):
        return f"b'{value}'"
    if isinstance(value, (bytes, bytearray)):
        return _bytes_literal(bytes(value))
    if isinstance(value, (dict, list)):
        value = json.dumps(value, ensure_ascii=False)
    return _string_literal(str(value))


def _set_literal(members, column):
    if all(isinstance(m, _Bit) for m in members):
        return str(sum(members))
    order = getattr(column, "set_values", None) or sorted(members)
    return _string_literal(",".join(m for m in order if m in members))


def _string_literal(text, size=None):
    """A quoted string literal, or X'hex' when it holds control characters; cut after
    VALUE_CAP characters (``size``: the bytes it was decoded from, when they were cut)."""
    if size is None and len(text) <= VALUE_CAP and text.isalnum() and text.isascii():
        return f"'{text}'"  # nothing to escape, nothing to cut
    if _CONTROL.search(text[:VALUE_CAP]):
        return _hex(text[:VALUE_CAP].encode("utf-8"), size or len(text.encode("utf-8")))
    shown = _SPECIAL.sub(lambda m: _ESCAPES[m[0]], text[:VALUE_CAP])
    if size is not None:
        return f"'{shown}'... ({size} bytes)"
    if len(text) > VALUE_CAP:
        return f"'{shown}'... ({len(text)} characters)"
    return f"'{shown}'"


def _bytes_literal(data):
    """Bytes as a string literal when they are UTF-8 text, else X'hex'; cut likewise."""
    head = data[:VALUE_CAP * 4]
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError as e:  # a character cut at the end of ``head`` is no fault
        text = head[:e.start].decode("utf-8") if len(head) < len(data) and \
            e.start > len(head) - 4 else None
    if text is None:
        return _hex(data[:VALUE_CAP // 2], len(data))
    cut = len(head) < len(data) or len(text) > VALUE_CAP
    return _string_literal(text, len(data) if cut else None)


def _hex(shown, size):
    """X'hex' of ``shown``, said to be cut when ``size`` (bytes) is more."""
    text = f"X'{bytes(shown[:VALUE_CAP // 2]).hex().upper()}'"
    return text + (f"... ({size} bytes)" if size > min(len(shown), VALUE_CAP // 2) else "")


def _float32(value):
    """The shortest text that reads back as the same 4-byte float."""
    packed = struct.pack("<f", value)
    for digits in range(6, 10):
        text = f"{value:.{digits}g}"
        if struct.pack("<f", float(text)) == packed:
            return text
    return repr(value)


def quote_name(name):
    """A schema, table or column name in backticks (backticks doubled, control
    characters as \\xNN)."""
    return "`" + printable(str(name)).replace("`", "``") + "`"


def _where(trx, event):
    start = position_of(trx, event)
    return f"{trx.file}:{'?' if start is None else start}"


# the compiled twin (``_rowtext``), through the project's one loader; its ``row_line`` and
# ``rows_text`` write with these what they do not write themselves
FUNCTIONS = ("configure_text", "row_line", "rows_text")


def _load():
    """The compiled twin, configured, or (None, why not)."""
    return load_twin("replay.job.decoding._rowtext", TWIN, FUNCTIONS, lambda module: (
        module.configure_text(literal, _string_literal, NONE_SOURCE.COLS_BITMAP,
                              FIELD_TYPE.BIT, _TIMESTAMPS, ROW_CAP, VALUE_CAP)))


compiled, _why = _load()
