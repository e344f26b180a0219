"""Row images -> the values an undo checks on the target, and the SQL that reads the
target's values in the same form (pure).

A row is checked against the target by comparing, column by column, one canonical form
that both sides can give exactly, whatever the column type: the binlog's bytes read here,
the target's value read by a SQL expression (``Column.canon``):

=================================  ==========================  =========================
binlog type                        read here                   the target's expression
=================================  ==========================  =========================
integers, DECIMAL, DOUBLE          int / Decimal / float       ``c``
FLOAT                              the double its 4 bytes are  ``CAST(c AS DOUBLE)``
YEAR, ENUM, SET, BIT               an integer (index, mask)    ``c+0``
DATE, DATETIME, TIME (any fsp)     the text the server prints  ``CAST(c AS CHAR)``
TIMESTAMP (any fsp)                seconds since 1970, Decimal ``UNIX_TIMESTAMP(c)``
strings, BLOB/TEXT, GEOMETRY,      the bytes, as hex           ``HEX(c)``
VECTOR, MariaDB's JSON                                         
MySQL's JSON                       its text (``mysqljson``)    ``CAST(c AS CHAR)``
=================================  ==========================  =========================

So a zero or invalid date under a permissive sql_mode compares as itself, a string
compares byte for byte (a change of case or of trailing bytes is a difference, whatever
the collation says), and a FLOAT compares by its bits. Signedness and whether a fixed
string is binary (BINARY(n), MariaDB's INET6 and UUID: the binlog drops their trailing
zero bytes, which HEX shows) come from the target's columns (the binlog says neither
without binlog_row_metadata). A column type outside this table (the pre-5.0 DECIMAL, MariaDB's
compressed columns) raises ``Unchecked``.
"""

import datetime
import decimal
import struct
from dataclasses import dataclass

from mysqlbackup.binlog.tablemap import ColumnType, value_size
from replay.job.decoding.mysqljson import json_text
from replay.job.decoding.rowloop import read_decimal, time2

NUM, BITS, TEXT, EPOCH, HEX, JSON = "num", "bits", "text", "epoch", "hex", "json"
_INTS = {1: 1, 2: 2, 9: 3, 3: 4, 8: 8}
_BLOBS = frozenset({249, 250, 251, 252, 255, 242, 245})
_ENUM, _SET = 247, 248
_FLOAT, _DOUBLE = struct.Struct("<f").unpack_from, struct.Struct("<d").unpack_from


class Unchecked(Exception):
    """A column type whose values the undo cannot compare."""


@dataclass(frozen=True)
class Column:
    """One column as the check sees it: the binlog's type and metadata, the target's
    name, signedness, BINARY length, character set and whether it is generated."""

    ctype: int
    meta: bytes
    name: str
    unsigned: bool = False
    binary_length: int = 0     # BINARY(n), INET6, UUID: n (the binlog drops trailing zeros)
    charset: str = None        # the target's character set (None: binary)
    collation: str = None      # the target's collation of a text column
    generated: bool = False
    mysql_json: bool = False   # a type 245 column of MySQL: binary JSON

    @property
    def form(self):
        """NUM, BITS, TEXT, EPOCH, HEX or JSON (see the module)."""
        real = self._real()
        if real in _INTS or real in (4, 5, 246):
            return NUM
        if real in (13, _ENUM, _SET, 16):
            return BITS
        if real in (10, 11, 12, 18, 19):
            return TEXT
        if real in (7, 17):
            return EPOCH
        if real == 245 and self.mysql_json:
            return JSON
        if real in _BLOBS or real in (15, 254):
            return HEX
        raise Unchecked(f"column {self.name} of binlog type {self.ctype}")

    def _real(self):
        if self.ctype == 254 and self.meta and self.meta[0] in (_ENUM, _SET):
            return self.meta[0]
        return self.ctype

    def canon(self):
        """The SQL expression of the target's value in this column's form."""
        c = quote(self.name)
        return {NUM: f"CAST({c} AS DOUBLE)" if self._real() == 4 else c, BITS: f"{c}+0",
                TEXT: f"CAST({c} AS CHAR)", EPOCH: f"UNIX_TIMESTAMP({c})", HEX: f"HEX({c})",
                JSON: f"CAST({c} AS CHAR)"}[self.form]

    def match(self, value):
        """(SQL, parameters) true where the target's column holds a value that is, or
        that the column's collation takes for, ``value`` (of this column's form): what
        an index serves, for the primary key's lookup (the caller compares exactly)."""
        c, form = quote(self.name), self.form
        if value is None:
            return f"{c} IS NULL", ()
        if form == NUM or form == TEXT:
            return f"{c} = %s", (value,)
        if form == EPOCH and value:
            return f"{c} = FROM_UNIXTIME(%s)", (value,)
        if form == HEX and self.charset:
            collate = f" COLLATE {self.collation}" if self.collation else ""
            return f"{c} = CONVERT(UNHEX(%s) USING {self.charset}){collate}", (value,)
        if form == HEX:
            return f"{c} = UNHEX(%s)", (value,)
        return self.same(value)

    def same(self, value):
        """(SQL, parameters) true exactly where the target's column holds ``value``: its
        canonical form equal byte for byte (a whole-row match)."""
        if value is None:
            return f"{quote(self.name)} IS NULL", ()
        if self.form in (NUM, BITS, EPOCH):
            return f"{self.canon()} = %s", (value,)
        return f"BINARY {self.canon()} = %s", (value,)


def quote(name):
    """A backquoted identifier."""
    return "`" + name.replace("`", "``") + "`"


def normal(value):
    """A value as the driver gives it, in the form the binlog's reading has (the same type
    for the same column: int, Decimal, float, str), bytes decoded."""
    if type(value) is bytes or type(value) is bytearray:
        return value.decode("utf-8", "replace")
    return value


class ImageReader:
    """Reads row images of one table: a reader per column, chosen once (``read``)."""

    def __init__(self, columns):
        self.columns = columns
        self.readers = [_reader(c) for c in columns]
        self._shown = {}

    def read(self, data, pos, present):
        """(values, position after) of the row image at ``pos`` with the columns of
        bitmap ``present``: one value per column in its form (None for NULL, and for a
        column the image lacks)."""
        shown = self._shown.get(present)
        if shown is None:
            shown = self._shown[present] = tuple(
                (i, self.readers[i]) for i in range(len(self.columns)) if present >> i & 1)
        nb = (len(shown) + 7) // 8
        nulls = int.from_bytes(data[pos:pos + nb], "little")
        pos += nb
        values = [None] * len(self.columns)
        for n, (i, reader) in enumerate(shown):
            if not (nulls >> n & 1):
                values[i], pos = reader(data, pos)
        return values, pos


# length-prefixed types whose bytes are not the value (MariaDB's compressed VARCHAR)
_NOT_READ = frozenset({ColumnType.VARCHAR_COMPRESSED, ColumnType.VAR_STRING})


def _reader(column):
    """A function (data, pos) -> (value, position after) of one column."""
    ctype, meta, from_bytes = column._real(), column.meta, int.from_bytes
    if ctype in _INTS:
        size, signed = _INTS[ctype], not column.unsigned
        return lambda data, pos: (from_bytes(data[pos:pos + size], "little", signed=signed),
                                  pos + size)
    if ctype == 4:
        return lambda data, pos: (_FLOAT(data, pos)[0], pos + 4)
    if ctype == 5:
        return lambda data, pos: (_DOUBLE(data, pos)[0], pos + 8)
    if ctype == 246:
        return lambda data, pos: read_decimal(data, pos, meta[0], meta[1])
    if ctype in (10, 11, 12, 18, 19, 7, 17):
        return lambda data, pos: _temporal(data, pos, ctype, meta)
    if ctype == 13:
        return lambda data, pos: ((data[pos] + 1900 if data[pos] else 0), pos + 1)
    if ctype in (_ENUM, _SET, 16):
        size = meta[1] if ctype != 16 else meta[1] + (1 if meta[0] else 0)
        order = "big" if ctype == 16 else "little"
        return lambda data, pos: (from_bytes(data[pos:pos + size], order), pos + size)
    column.form  # noqa: B018 - Unchecked for a type not compared
    return lambda data, pos: _bytes(data, pos, column)


def _bytes(data, pos, column):
    ctype, meta = column._real(), column.meta
    # a length-prefixed value (``tablemap.value_size``); not a compressed VARCHAR's
    sized = None if ctype in _NOT_READ else value_size(ctype, meta)
    if sized is None or not sized[1]:
        raise Unchecked(f"column {column.name} of binlog type {column.ctype}")
    prefix = sized[1]
    size = int.from_bytes(data[pos:pos + prefix], "little")
    raw = bytes(data[pos + prefix:pos + prefix + size])
    if column.form == JSON:
        return json_text(raw), pos + prefix + size
    if column.binary_length:
        raw = raw.ljust(column.binary_length, b"\x00")
    return raw.hex().upper(), pos + prefix + size


def _temporal(data, pos, ctype, meta):
    if ctype == 10:
        packed = int.from_bytes(data[pos:pos + 3], "little")
        return f"{packed >> 9:04d}-{packed >> 5 & 15:02d}-{packed & 31:02d}", pos + 3
    if ctype == 12:
        v = int.from_bytes(data[pos:pos + 8], "little")
        d, t = divmod(v, 1_000_000)
        return (f"{d // 10000:04d}-{d // 100 % 100:02d}-{d % 100:02d} "
                f"{t // 10000:02d}:{t // 100 % 100:02d}:{t % 100:02d}"), pos + 8
    if ctype == 11:
        v = int.from_bytes(data[pos:pos + 3], "little", signed=True)
        sign, v = ("-" if v < 0 else ""), abs(v)
        return f"{sign}{v // 10000:02d}:{v // 100 % 100:02d}:{v % 100:02d}", pos + 3
    if ctype == 7:
        return decimal.Decimal(int.from_bytes(data[pos:pos + 4], "little")), pos + 4
    fsp = meta[0]
    n = (fsp + 1) // 2
    if ctype == 17:
        seconds = int.from_bytes(data[pos:pos + 4], "big")
        micros = _micros(data, pos + 4, fsp)
        text = f"{seconds}" + (f".{micros:06d}"[:fsp + 1] if fsp else "")
        return decimal.Decimal(text), pos + 4 + n
    if ctype == 18:
        packed = int.from_bytes(data[pos:pos + 5], "big")
        ym = packed >> 22 & 0x1FFFF
        text = (f"{ym // 13:04d}-{ym % 13:02d}-{packed >> 17 & 31:02d} "
                f"{packed >> 12 & 31:02d}:{packed >> 6 & 63:02d}:{packed & 63:02d}")
        return text + _fraction_text(_micros(data, pos + 5, fsp), fsp), pos + 5 + n
    delta = time2(bytes(data[pos:pos + 3 + n]), fsp)  # 19: TIME2
    return _time_text(delta, fsp), pos + 3 + n


def _micros(data, pos, fsp):
    n = (fsp + 1) // 2
    if not n:
        return 0
    value = int.from_bytes(data[pos:pos + n], "big")
    if fsp % 2:
        value //= 10
    return value * 10 ** (6 - fsp)


def _fraction_text(micros, fsp):
    return f".{micros:06d}"[:fsp + 1] if fsp else ""


def _time_text(delta, fsp):
    micros = delta // datetime.timedelta(microseconds=1)
    sign, micros = ("-" if micros < 0 else ""), abs(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    return (f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
            + _fraction_text(fraction, fsp))
