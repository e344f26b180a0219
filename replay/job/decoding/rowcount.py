"""Rows events -> the table they change and how many rows they hold, without decoding a
single value (pure).

A rows event says nothing of its row count: its rows are row images back to back, each
a null bitmap then the values of the columns that are present and not NULL, and a
value's size comes from its column's type and metadata in the TABLE_MAP before it.
``TableLayout.parse`` reads a TABLE_MAP once (table id, ``db.table``, each column's
fixed size or the size of its length prefix, which columns may be NULL); ``count_rows``
walks the images of one rows event from one size to the next. The walk is planned per
null pattern (``_plan``: the fixed bytes between two length-prefixed values), so a row
costs a dict lookup and one step per variable-length value; a table without NULL-able
or variable-length columns is counted by one division. This is what lets
``archive find`` count the rows of every rows event at the speed of its scan.

Sizes follow the server's row format (``log_event.cc``, ``field.cc``): integers, FLOAT,
DOUBLE, YEAR, DATE, TIME, DATETIME, TIMESTAMP fixed; TIMESTAMP2 / DATETIME2 / TIME2 their
base plus (fsp + 1) // 2; NEWDECIMAL its packed size from precision and scale; BIT its
whole bytes plus one for leftover bits; ENUM / SET their pack length; VARCHAR, CHAR,
BINARY a 1- or 2-byte length prefix (255 bytes at most: 1); BLOB, TEXT, JSON, GEOMETRY,
VECTOR and MariaDB's compressed columns the prefix size their metadata gives. A column
type outside these (the pre-5.0 DECIMAL) leaves the rows uncounted (``None``), as does
a MySQL PARTIAL_UPDATE_ROWS event (its JSON after-images are diffs) and an event whose
images do not end exactly at its end.
"""

import struct

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.tablemap import COLUMN_TYPES, parse_table_map, value_size
from mysqlbackup.errors import CorruptBinlog
from mysqlbackup.speedups import load_twin
from replay.job.decoding import rowdecode
from replay.job.decoding.sqltext import printable

# the version of the twins: ``_rowcount.TWIN`` must be the same (bump both on a change)
TWIN = 1
# event type -> the kind of change its rows are
ROW_KINDS = {23: "insert", 30: "insert", 24: "update", 31: "update", 39: "update",
             25: "delete", 32: "delete"}
_UPDATES = frozenset({24, 31, 39})
_V2 = frozenset({30, 31, 32, 39})
_U16 = struct.Struct("<H").unpack_from


class TableLayout:
    """What a TABLE_MAP says of its table's rows: ``name`` ('db.table', printable),
    ``columns``
    ((fixed size, length-prefix size) each, one of them 0), ``nullable`` (bit i: column
    i may be NULL) and ``unsupported`` (why the rows cannot be walked, or None)."""

    __slots__ = ("table_id", "db", "table", "name", "columns", "nullable", "unsupported",
                 "_plans")

    def __init__(self, table_id, db, table, columns, nullable, unsupported=None):
        self.table_id, self.db, self.table = table_id, db, table
        self.name = printable(f"{db}.{table}")
        self.columns, self.nullable, self.unsupported = tuple(columns), nullable, unsupported
        self._plans = {}

    @classmethod
    def parse(cls, event, fde, checksum):
        """The layout a whole TABLE_MAP event describes (``tablemap.parse_table_map``, the
        one reader of TABLE_MAPs); ValueError when it does not parse."""
        try:
            table_map = parse_table_map(event, checksum, fde)
        except CorruptBinlog as e:
            raise ValueError(f"TABLE_MAP does not parse: {e.detail}") from None
        return cls.of(table_map)

    @classmethod
    def of(cls, table_map):
        """The layout of a ``tablemap.TableMap``."""
        columns, unsupported = [], None
        if len(table_map.metas) != len(table_map.types):  # a type of unknown metadata
            unknown = [t for t in table_map.types if t not in COLUMN_TYPES]
            unsupported = f"column type {unknown[0] if unknown else '?'}"
        for ctype, meta in zip(table_map.types, table_map.metas):
            column = value_size(ctype, meta)
            if column is None and unsupported is None:
                unsupported = f"column type {ctype}"
            columns.append(column or (0, 0))
        nullable = sum(1 << i for i, null in enumerate(table_map.nullable) if null)
        return cls(table_map.table_id, table_map.schema, table_map.table,
                   columns or [(0, 0)] * len(table_map.types), nullable, unsupported)

    def plan(self, present, nulls):
        """(steps, tail) of one row image whose present columns are the bits of
        ``present`` and whose NULL ones the bits of ``nulls`` (numbered over the present
        columns): each step the fixed bytes before a length-prefixed value and its
        prefix size; ``tail`` the fixed bytes after the last one."""
        key = (present, nulls)
        found = self._plans.get(key)
        if found is None:
            steps, fixed, index = [], 0, 0
            for i, (size, prefix) in enumerate(self.columns):
                if not present >> i & 1:
                    continue
                if not nulls >> index & 1:
                    if prefix:
                        steps.append((fixed, prefix))
                        fixed = 0
                    else:
                        fixed += size
                index += 1
            found = self._plans[key] = (tuple(steps), fixed)
        return found

    def constant_size(self, present):
        """The size of every row image with these present columns when no present column
        may be NULL or has a variable length; else None."""
        key = ("constant", present)
        if key not in self._plans:
            variable = any(present >> i & 1 and (prefix or self.nullable >> i & 1)
                           for i, (_, prefix) in enumerate(self.columns))
            self._plans[key] = None if variable else (
                (bin(present).count("1") + 7) // 8 + self.plan(present, 0)[1])
        return self._plans[key]


def _table_id(view, fde, etype):
    """(position after the table id, table id) of a TABLE_MAP or rows event: 6 bytes,
    or 4 where the format description gives its post-header 6 bytes (MySQL 5.1.x)."""
    size = table_id_size(fde, etype)
    start = ev.HEADER_LEN
    return start + size, int.from_bytes(view[start:start + size], "little")


def table_id_size(fde, etype):
    """The size of the table id in a TABLE_MAP or rows event of type ``etype``: 6
    bytes, or 4 where the format description gives its post-header 6 bytes."""
    default = 10 if etype in _V2 else 8
    return 4 if ev.post_header_len(fde, etype, default) == 6 else 6


def count_rows(event, layout, fde, checksum):
    """How many rows the rows event ``event`` holds, its table's ``layout`` given; None
    when they cannot be walked (see the module)."""
    if layout is None or layout.unsupported or event[4] not in ROW_KINDS or event[4] == 39:
        return None
    view = memoryview(event)
    try:
        return _count(view, layout, fde, len(view) - (ev.CRC_LEN if checksum else 0))
    except (IndexError, ValueError, struct.error):
        return None


def _count(view, layout, fde, end):
    etype = view[4]
    pos = _table_id(view, fde, etype)[0] + 2  # flags
    if etype in _V2:
        pos += _U16(view, pos)[0]  # extra data, its own 2 bytes included
    ncols, pos = ev.packed_int(view, pos)
    width = (ncols + 7) // 8
    before = int.from_bytes(view[pos:pos + width], "little")
    pos += width
    after = before
    if etype in _UPDATES:
        after = int.from_bytes(view[pos:pos + width], "little")
        pos += width
    if pos > end:
        raise ValueError("rows event shorter than its header")
    images = 2 if etype in _UPDATES else 1
    sizes = [layout.constant_size(before), layout.constant_size(after)]
    if None not in sizes:
        row = sizes[0] + (sizes[1] if images == 2 else 0)
        if row <= 0 or (end - pos) % row:
            raise ValueError("rows do not fill the event")
        return (end - pos) // row
    walk = rowdecode.twin(compiled, "walk_rows", walk_rows)
    return walk(view, pos, end, layout.plan, (before, after) if images == 2 else (before,))


def walk_rows(view, pos, end, plan_of, presents):
    """Rows counted image by image from ``pos`` to ``end`` of ``view``, each row an image
    of each of ``presents`` (columns-present bitmaps), ``plan_of(present, nulls)`` the
    walk of one (``TableLayout.plan``). IndexError or ValueError when the images do not
    end exactly at ``end``. The compiled twin: ``_rowcount.walk_rows``."""
    walks = [(present, (bin(present).count("1") + 7) // 8, {}) for present in presents]
    rows = 0
    while pos < end:
        for present, nb, plans in walks:
            nulls = view[pos] if nb == 1 else int.from_bytes(view[pos:pos + nb], "little")
            plan = plans.get(nulls)
            if plan is None:
                plan = plans[nulls] = plan_of(present, nulls)
            pos += nb
            for skip, prefix in plan[0]:
                pos += skip
                if prefix == 1:
                    pos += 1 + view[pos]
                elif prefix == 2:
                    pos += 2 + view[pos] + (view[pos + 1] << 8)
                else:
                    pos += prefix + int.from_bytes(view[pos:pos + prefix], "little")
            pos += plan[1]
        rows += 1
    if pos != end:
        raise ValueError("a row runs past the event's end")
    return rows


# the compiled twin (``_rowcount``), through the project's one loader
FUNCTIONS = ("walk_rows",)


def _load():
    """The compiled twin, or (None, why not)."""
    return load_twin("replay.job.decoding._rowcount", TWIN, FUNCTIONS, lambda module: None)


compiled, _why = _load()
