"""Rows events -> their rows, decoded straight from the event's bytes (pure).

The reference decoder is the ``mysql-replication`` package (``changes.decode_event``):
it reads a value through several method calls and a ``struct`` call each, which is most
of a replay's time. ``decode_rows`` reads the same rows from the bytes of one rows event
with a plan made once per table (``plan_of``: one small tuple per column), and gives
them in the library's shape, value for value and type for type::

    {"values": {name: value}, "none_sources": {name: why None}}            # insert, delete
    {"before_values": ..., "before_none_sources": ...,
     "after_values": ..., "after_none_sources": ...}                         # update

so ``changes`` (the change table) and ``rowtext`` (the ``###`` lines) keep one meaning
of a value whichever decoder ran. The table is the library's, from its TABLE_MAP
(decoded once per table: names, signedness, character sets, ENUM and SET strings).

What this module reads: integers, FLOAT, DOUBLE, DECIMAL, CHAR/VARCHAR/BINARY/TEXT/BLOB
(decoded with the column's character set as the library decodes them, the bytes kept
when Python lacks the codec), DATE, DATETIME2, TIMESTAMP2, TIME2 (the mended reading,
``time2``), YEAR, ENUM, SET, BIT, GEOMETRY, and MySQL's binary JSON (its text:
``mysqljson``). Any other column type (the pre-5.6 temporal types, MariaDB's compressed
columns, MySQL 9's VECTOR, the pre-5.0 DECIMAL) raises ``Unsupported`` and the caller
decodes that event with the library, so a rare type costs speed, never a difference.

``tests/test_rowdecode.py`` holds the two decoders equal on every rows event of the
binlogs in ``../shared/binlogs`` and of the live servers' files.
"""

import codecs
import zlib
from typing import NamedTuple

from pymysql.charset import charset_by_name

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.tablemap import ColumnType as T
from mysqlbackup.speedups import LOADED, load_twin
from replay.job.decoding import rowloop
from replay.job.decoding.rowloop import (K_BIT, K_BYTES, K_DATE, K_DATETIME2, K_DECIMAL,
                                         K_DOUBLE, K_ENUM, K_FLOAT, K_INT, K_JSON, K_SET,
                                         K_STRING, K_TIME2, K_TIMESTAMP2, K_YEAR)

_INTEGER_SIZES = {T.TINY: 1, T.SHORT: 2, T.INT24: 3, T.LONG: 4, T.LONGLONG: 8}
_STRING_TYPES = (T.VARCHAR, T.STRING)              # (CHAR, BINARY)
_SIMPLE = {T.FLOAT: (K_FLOAT, 4, None), T.DOUBLE: (K_DOUBLE, 8, None),
           T.DATE: (K_DATE, 3, None), T.YEAR: (K_YEAR, 1, None)}
_FRACTIONAL = {T.TIMESTAMP2: K_TIMESTAMP2, T.DATETIME2: K_DATETIME2, T.TIME2: K_TIME2}
_UPDATES = frozenset({24, 31})
_V2 = frozenset({30, 31, 32})
_from_bytes = int.from_bytes


class Unsupported(Exception):
    """A column type (or an event shape) this module does not read: decode the event with
    the reference decoder instead."""


class ColumnPlan(NamedTuple):
    """How to read one column's values (the row loops read it by index, in C too):
    ``kind`` (``rowloop.K_*``), its parameters ``p1`` and ``p2`` (an integer's size and
    whether it is signed; a string's length-prefix size and codec, None: bytes kept; a
    DECIMAL's precision and scale; a temporal type's fsp; ENUM's and SET's size and
    strings; BIT's bytes and bits; a blob's or JSON's length-prefix size) and ``name``."""

    kind: int
    p1: object
    p2: object
    name: str


class ImagePlan(NamedTuple):
    """One row image's plan (``Plan.image``): ``columns`` the ColumnPlans of the columns
    it holds, ``values`` and ``sources`` a row of none of them set (every column None;
    a column not in the image, its none source ``rowloop.COLS_BITMAP``), ``width`` its
    null bitmap's bytes, ``shown`` whether each of the table's columns is in it."""

    columns: tuple
    values: dict
    sources: dict
    width: int
    shown: tuple


class Plan:
    """How to read one table's columns: ``columns`` (a ColumnPlan per column, in the
    table's order) and the table's identity the rows carry. ``image(present)`` is the
    plan of one row image with those columns present."""

    __slots__ = ("columns", "schema", "table", "table_id", "_images")

    def __init__(self, columns, schema, table, table_id):
        self.columns = tuple(ColumnPlan(*c) for c in columns)  # (tuples taken as such)
        self.schema, self.table, self.table_id = schema, table, table_id
        self._images = {}

    def image(self, present):
        """The ImagePlan of the row images whose columns-present bitmap is ``present``."""
        found = self._images.get(present)
        if found is None:
            chosen = tuple(c for i, c in enumerate(self.columns) if present >> i & 1)
            values = {c.name: None for c in self.columns}
            sources = {c.name: rowloop.COLS_BITMAP for i, c in enumerate(self.columns)
                       if not present >> i & 1}
            shown = tuple(bool(present >> i & 1) for i in range(len(self.columns)))
            found = self._images[present] = ImagePlan(chosen, values, sources,
                                                      (len(chosen) + 7) // 8, shown)
        return found


def plan_of(table, dbms):
    """The plan of the library's table (``Unsupported`` for a column type not read here).
    ``dbms``: 'mysql' or 'mariadb' (a type 245 column is MySQL's binary JSON)."""
    columns = []
    for i, column in enumerate(table.columns):
        name = column.name or f"UNKNOWN_COL{i}"
        columns.append(ColumnPlan(*_column_plan(column, dbms), name))
    return Plan(tuple(columns), table.schema, table.table, table.table_id)


def kept_plan(table, dbms):
    """``plan_of`` a decoded TABLE_MAP, made once and kept on the table."""
    plan = table.__dict__.get("_rowdecode_plan")
    if plan is None:
        plan = table.__dict__["_rowdecode_plan"] = plan_of(table, dbms)
    return plan


def post_header(lens, etype):
    """The post-header length of an event type in the format description's ``lens``
    (None: not given)."""
    return lens[etype - 1] if etype <= len(lens) else None


def _column_plan(column, dbms):
    """(kind, parameter 1, parameter 2) of one column."""
    ctype = column.type
    if ctype in _INTEGER_SIZES:
        return K_INT, _INTEGER_SIZES[ctype], not column.unsigned
    if ctype in _STRING_TYPES:
        return K_STRING, 2 if column.max_length > 255 else 1, _encoding(column)
    if ctype == T.BLOB:
        return K_STRING, column.length_size, _encoding(column)
    if ctype in _SIMPLE:
        return _SIMPLE[ctype]
    if ctype == T.NEWDECIMAL:
        return K_DECIMAL, column.precision, column.decimals
    if ctype in _FRACTIONAL:
        return _FRACTIONAL[ctype], column.fsp, None
    if ctype == T.ENUM:
        return K_ENUM, column.size, column.enum_values
    if ctype == T.SET:
        return K_SET, column.size, column.set_values
    if ctype == T.BIT:
        return K_BIT, column.bytes, column.bits
    if ctype == T.GEOMETRY:
        return K_BYTES, column.length_size, None
    if ctype == T.JSON and dbms == "mysql":
        return K_JSON, column.length_size, None
    raise Unsupported(f"column type {ctype}")


def _encoding(column):
    """The codec a string column's bytes are decoded with (None: kept as bytes), as the
    library picks it: the character set's Python encoding, UTF-8 when the TABLE_MAP gives
    none."""
    name = column.character_set_name
    if name is None:
        return "utf-8"
    charset = charset_by_name(name)
    encoding = charset.encoding if charset else name
    try:
        return codecs.lookup(encoding).name  # 'utf-8' for utf8 and utf8mb4
    except LookupError:
        return None


def crc_ok(event):
    """Whether a whole event's last 4 bytes are the CRC32 of the rest."""
    end = len(event) - ev.CRC_LEN
    return zlib.crc32(memoryview(event)[:end]) == _from_bytes(event[end:], "little")


def decode_rows(event, plan, checksum, post_header=None):
    """The rows of one whole rows event (types 23-25, 30-32) of ``plan``'s table, in the
    library's shape (see the module); its CRC is the caller's to check (``crc_ok``).
    ValueError (or IndexError) when the rows do not fill the event exactly;
    ``Unsupported`` for an event shape not read here (``post_header``: the length the
    format description gives this type's post-header, when it is not the usual one)."""
    data, pos, end, before, after = row_images(event, plan, checksum, post_header)
    rows, pos = loop.read_rows(data, pos, end, before, after)
    if pos != end:
        raise ValueError(f"rows decoded to byte {pos} of {end}")
    return rows


def row_images(event, plan, checksum, post_header=None):
    """(the event's bytes, where its rows start and end, the plan of its (first) row
    image, of an update's second image or None): what a row loop reads (``decode_rows``;
    ``rowtext``'s lines). Raises as ``decode_rows``."""
    data = bytes(event)
    end = len(data) - (ev.CRC_LEN if checksum else 0)
    etype = data[4]
    if post_header is not None and post_header != (10 if etype in _V2 else 8):
        raise Unsupported(f"a post-header of {post_header} bytes")
    pos = ev.HEADER_LEN + 8
    if etype in _V2:
        pos += _from_bytes(data[pos:pos + 2], "little")
    count, pos = ev.packed_int(data, pos)
    if count != len(plan.columns):
        raise Unsupported(f"{count} columns in the rows event, {len(plan.columns)} in its "
                          f"TABLE_MAP")
    width = (count + 7) // 8
    present = _from_bytes(data[pos:pos + width], "little")
    pos += width
    after = None
    if etype in _UPDATES:
        after = plan.image(_from_bytes(data[pos:pos + width], "little"))
        pos += width
    return data, pos, end, plan.image(present), after


# what the row decoders take from ``_rowloop`` (the twin of ``rowloop``); each other pure
# module loads its own compiled twin, side by side with it: ``rowtext`` (``_rowtext``),
# ``changejson`` (``_changejson``), ``rowcount`` (``_rowcount``)
FUNCTIONS = ("configure", "read_rows")


def _load():
    """The compiled row loop (``_rowloop``), or (None, why not)."""
    return load_twin("replay.job.decoding._rowloop", rowloop.TWIN, FUNCTIONS,
                     lambda module: module.configure(rowloop.READERS, rowloop.KINDS))


compiled, _why = _load()
loop = compiled if compiled is not None else rowloop


def twin(module, name, pure):
    """The function ``name`` of the compiled twin ``module`` (a pure module's
    ``compiled``: it loaded whole, every one of its FUNCTIONS), else ``pure``, its pure
    Python twin; the pure ones everywhere while the pure row loop runs (``loop``: the
    one switch the tests and the benchmark turn)."""
    return pure if loop is rowloop or module is None else getattr(module, name)


COMPILED = "row decoding: compiled (Cython)"  # describe's line when every twin runs


def describe():
    """One line: whether the row decoders' compiled twins run (those of the modules
    imported so far: ``speedups.LOADED``), and why one does not."""
    found = {name.rsplit(".", 1)[1]: why for name, why in LOADED.items()
             if name.startswith("replay.job.decoding.")}
    failed = {name: why for name, why in found.items() if why != "compiled"}
    if not failed:
        return COMPILED
    if len(failed) == len(found) and len(set(failed.values())) == 1:
        return f"row decoding: pure Python ({next(iter(failed.values()))})"
    return "row decoding: pure Python in part (" + "; ".join(
        f"{name}: {why}" for name, why in sorted(failed.items())) + ")"


