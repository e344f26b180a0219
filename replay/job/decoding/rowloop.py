"""The loop over a rows event's row images and the readers of each column kind (pure):
the Python twin of ``_rowloop`` (compiled with Cython when the package is built with a C
compiler; ``rowdecode`` picks one). Both take the same arguments and give the same rows,
values of the same types, and raise the same exception types; ``tests/test_rowdecode.py``
holds them together.

A row image's plan (``rowdecode.Plan.image``): (the present columns' (kind, parameter 1,
parameter 2, name), a dict of every column to None, a dict of the absent ones to
COLS_BITMAP, the null bitmap's width, a bool per column: present).
"""

import datetime
import decimal
import struct

from mysqlbackup.binlog.tablemap import decimal_groups
from replay.job.decoding.mysqljson import json_text

NULL, COLS_BITMAP, EMPTY_SET = "null", "cols bitmap", "empty set"
OUT_OF_DATE, OUT_OF_DATETIME2 = "out of date range", "out of datetime2 range"
# the column kinds of a plan (one reading routine each)
(K_INT, K_FLOAT, K_DOUBLE, K_STRING, K_DECIMAL, K_DATETIME2, K_TIMESTAMP2, K_DATE,
 K_TIME2, K_YEAR, K_ENUM, K_SET, K_BIT, K_BYTES, K_JSON) = range(15)
KINDS = 15
# the version of the twins: ``_rowloop.TWIN`` must be the same (bump both on a change)
TWIN = 9
_FLOAT = struct.Struct("<f").unpack_from
_DOUBLE = struct.Struct("<d").unpack_from
_EPOCH = datetime.datetime(1970, 1, 1)
_DATETIME, _DATE, _TIMEDELTA = datetime.datetime, datetime.date, datetime.timedelta
_Decimal = decimal.Decimal
_from_bytes = int.from_bytes


def read_rows(data, pos, end, before, after):
    """([row, ...], position after) of the row images from ``pos`` to ``end`` of
    ``data`` (bytes): a row is {"values", "none_sources"}, or with ``after`` (an
    update's second image plan) {"before_values", "before_none_sources", "after_values",
    "after_none_sources"}. ValueError (or IndexError) when a row runs past ``end``."""
    rows = []
    if after is not None:
        while pos < end:
            before_values, before_sources, pos = _image(data, pos, end, before)
            after_values, after_sources, pos = _image(data, pos, end, after)
            rows.append({"before_values": before_values, "before_none_sources": before_sources,
                         "after_values": after_values, "after_none_sources": after_sources})
    else:
        while pos < end:
            values, sources, pos = _image(data, pos, end, before)
            rows.append({"values": values, "none_sources": sources})
    return rows, pos


def _image(data, pos, end, image):
    """(values, none sources, position after) of one row image (``Plan.image``)."""
    columns, values, sources, width = image[:4]
    values, sources = values.copy(), sources.copy()
    nulls = data[pos] if width == 1 else _from_bytes(data[pos:pos + width], "little")
    pos += width
    for index, (kind, p1, p2, name) in enumerate(columns):
        if nulls and nulls >> index & 1:
            sources[name] = NULL
        elif kind == K_INT:
            values[name] = _from_bytes(data[pos:pos + p1], "little", signed=p2)
            pos += p1
        elif kind == K_STRING:
            size = data[pos] if p1 == 1 else _from_bytes(data[pos:pos + p1], "little")
            pos += p1
            raw = data[pos:pos + size]
            pos += size
            # (bytes a codec Python lacks are kept, but for b'', which the library
            # "decodes" to '': Python decodes b'' in any codec without looking it up)
            values[name] = raw.decode(p2) if p2 is not None else raw or ""
        else:
            value, pos, source = READERS[kind](data, pos, p1, p2)
            values[name] = value
            if value is None:
                sources[name] = source
    if pos > end:
        raise ValueError("a row runs past the event's end")
    return values, sources, pos


def _float(data, pos, size, _):
    return _FLOAT(data, pos)[0], pos + 4, None


def _double(data, pos, size, _):
    return _DOUBLE(data, pos)[0], pos + 8, None


def _decimal(data, pos, precision, scale):
    """A packed DECIMAL, as the library builds it (its text, then Decimal)."""
    negative, whole, fraction, after = decimal_groups(data, pos, precision, scale)
    return _Decimal(("-" if negative else "") + "".join(whole) + "." + "".join(fraction)), \
        after, None


def _fraction(data, pos, fsp):
    """(microseconds, position after) of a temporal value's fraction of ``fsp`` digits."""
    n = (fsp + 1) // 2
    if not n:
        return 0, pos
    value = _from_bytes(data[pos:pos + n], "big")
    if fsp % 2:
        value //= 10
    return value * 10 ** (6 - fsp), pos + n


def _datetime2(data, pos, fsp, _):
    packed = _from_bytes(data[pos:pos + 5], "big")
    micros, after = _fraction(data, pos + 5, fsp)
    year_month = packed >> 22 & 0x1FFFF
    try:
        value = _DATETIME(year_month // 13, year_month % 13, packed >> 17 & 31,
                          packed >> 12 & 31, packed >> 6 & 63, packed & 63, micros)
    except ValueError:
        return None, after, OUT_OF_DATETIME2
    return value, after, None


def _timestamp2(data, pos, fsp, _):
    seconds = _from_bytes(data[pos:pos + 4], "big")  # unsigned: MariaDB 11.5+ goes to 2106
    micros, after = _fraction(data, pos + 4, fsp)
    return _EPOCH + _TIMEDELTA(seconds=seconds, microseconds=micros), after, None


def _date(data, pos, size, _):
    packed = _from_bytes(data[pos:pos + 3], "little")
    year, month, day = packed >> 9 & 0x7FFF, packed >> 5 & 15, packed & 31
    if not (year and month and day):
        return None, pos + 3, OUT_OF_DATE
    return _DATE(year, month, day), pos + 3, None


def _time2(data, pos, fsp, _):
    size = 3 + (fsp + 1) // 2
    return time2(data[pos:pos + size], fsp), pos + size, None


def time2(raw, fsp):
    """A TIME(fsp) value of a rows event (MySQL 5.6+'s TIME2, MariaDB's too: 3 bytes of
    [sign][hours 10][minutes 6][seconds 6] and the fraction in (fsp + 1) // 2 bytes, the
    whole an offset integer) as a timedelta, negative fractions included."""
    n = (fsp + 1) // 2
    if n == 3:
        packed = int.from_bytes(raw[:6], "big") - 0x800000000000
    else:
        intpart, frac = int.from_bytes(raw[:3], "big") - 0x800000, 0
        if n:
            frac = int.from_bytes(raw[3:3 + n], "big")
            if intpart < 0 and frac:  # the fraction counts up from the next integer
                intpart, frac = intpart + 1, frac - (1 << (8 * n))
        packed = (intpart << 24) + frac * (10000 if n == 1 else 100)
    sign, packed = (-1 if packed < 0 else 1), abs(packed)
    hms = packed >> 24
    return sign * datetime.timedelta(hours=(hms >> 12) % 1024, minutes=(hms >> 6) % 64,
                                     seconds=hms % 64, microseconds=packed % (1 << 24))


def _year(data, pos, size, _):
    return data[pos] + 1900, pos + 1, None


def _enum(data, pos, size, strings):
    index = _from_bytes(data[pos:pos + size], "little")
    if strings:
        return strings[index], pos + size, None
    return None, pos + size, NULL


def _set(data, pos, size, strings):
    mask = _from_bytes(data[pos:pos + size], "little")
    members = {value for i, value in enumerate(strings or ()) if mask >> i & 1}
    if not members:
        return None, pos + size, EMPTY_SET
    return members, pos + size, None


def _bit(data, pos, size, bits):
    value = _from_bytes(data[pos:pos + size], "big")
    return format(value, "b").zfill(bits)[-bits:] if bits else "", pos + size, None


def _bytes(data, pos, prefix, _):
    size = _from_bytes(data[pos:pos + prefix], "little")
    start = pos + prefix
    return data[start:start + size], start + size, None


def _json(data, pos, prefix, _):
    raw, after, _ = _bytes(data, pos, prefix, None)
    return json_text(raw), after, None


READERS = {K_FLOAT: _float, K_DOUBLE: _double, K_DECIMAL: _decimal, K_DATETIME2: _datetime2,
            K_TIMESTAMP2: _timestamp2, K_DATE: _date, K_TIME2: _time2, K_YEAR: _year,
            K_ENUM: _enum, K_SET: _set, K_BIT: _bit, K_BYTES: _bytes, K_JSON: _json}


def read_decimal(data, pos, precision, scale):
    """(Decimal, position after) of the packed DECIMAL(precision, scale) at ``pos``."""
    value, after, _ = _decimal(data, pos, precision, scale)
    return value, after
