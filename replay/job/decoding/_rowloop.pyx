# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The compiled row loop (optional: ``replay.job.decoding.rowdecode`` says whether it is
built and in use; its pure Python twin, ``replay.job.decoding.rowloop``, has the same
functions with the same results, and ``tests/test_rowdecode.py`` holds them to it).

``read_rows`` reads the common column kinds (integers, FLOAT, DOUBLE, strings, DECIMAL,
DATETIME2, TIMESTAMP2, DATE, YEAR) from the event's bytes in C; every other kind is read
by the twin's own reader (``configure`` hands them over), so every unusual case stays in
one place.
"""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from cpython.datetime cimport date_new, datetime_new, import_datetime
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport int64_t, uint32_t, uint64_t
from libc.stdio cimport snprintf
from libc.stdlib cimport free, realloc
from libc.string cimport memcpy, strlen

import datetime
import decimal
import sys

import_datetime()
if sys.byteorder != "little":  # FLOAT and DOUBLE are copied as they lie
    raise ImportError("the compiled row loop reads FLOAT and DOUBLE on little-endian hosts")

# the version of the twins: ``rowloop.TWIN`` must be the same
TWIN = 6

cdef enum:
    K_INT = 0
    K_FLOAT = 1
    K_DOUBLE = 2
    K_STRING = 3
    K_DECIMAL = 4
    K_DATETIME2 = 5
    K_TIMESTAMP2 = 6
    K_DATE = 7
    K_YEAR = 9

cdef object _NULL = "null"
cdef object _OUT_OF_DATE = "out of date range"
cdef object _OUT_OF_DATETIME2 = "out of datetime2 range"
cdef object _UTF8 = "utf-8"
cdef object _Decimal = decimal.Decimal
cdef object _datetime = datetime.datetime
cdef list _readers = []
cdef int _dig2bytes[10]
_dig2bytes[:] = [0, 1, 1, 2, 2, 3, 3, 4, 4, 4]


def configure(readers, kinds):
    """The twin's readers, {kind: reader}, for the kinds read in Python."""
    global _readers
    _readers = [readers.get(k) for k in range(kinds)]


cdef inline uint64_t _le(const unsigned char *p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n - 1, -1, -1):
        v = (v << 8) | p[i]
    return v


cdef inline uint64_t _be(const unsigned char *p, int n) noexcept nogil:
    cdef uint64_t v = 0
    cdef int i
    for i in range(n):
        v = (v << 8) | p[i]
    return v


def read_rows(bytes data, Py_ssize_t pos, Py_ssize_t end, tuple before, tuple after):
    """([row, ...], position after) of the row images from ``pos`` to ``end``: see the
    twin's ``read_rows``."""
    cdef list rows = []
    if end > PyBytes_GET_SIZE(data):
        raise ValueError("the rows end past the event")
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


cdef inline int _need(Py_ssize_t pos, Py_ssize_t size, Py_ssize_t end) except -1:
    if pos + size > end:
        raise ValueError("a row runs past the event's end")
    return 0


cdef inline int _take(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, int n,
                      uint64_t *value) except -1:
    """The ``n``-byte little-endian integer at ``pos`` into ``value``, ``pos`` past it."""
    _need(pos[0], n, end)
    value[0] = _le(p + pos[0], n)
    pos[0] += n
    return 0


cdef inline int64_t _signed(uint64_t u, int n) noexcept:
    """An ``n``-byte integer read as signed."""
    if n < 8 and u >> (8 * n - 1):
        return <int64_t>u - (<int64_t>1 << (8 * n))
    return <int64_t>u


cdef tuple _image(bytes data, Py_ssize_t pos, Py_ssize_t end, tuple image):
    cdef tuple columns = <tuple>image[0]
    cdef dict values = (<dict>image[1]).copy()
    cdef dict sources = (<dict>image[2]).copy()
    cdef Py_ssize_t width = image[3]
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(data)
    cdef Py_ssize_t nulls = pos, index, count = len(columns), size
    cdef int kind, p1
    cdef tuple column
    cdef uint64_t u
    cdef double d
    cdef float f
    _need(pos, width, end)
    pos += width
    for index in range(count):
        column = <tuple>columns[index]
        name = column[3]
        if p[nulls + (index >> 3)] >> (index & 7) & 1:
            sources[name] = _NULL
            continue
        kind = column[0]
        if kind == K_INT:
            p1 = column[1]
            _take(p, &pos, end, p1, &u)
            if column[2]:
                values[name] = _signed(u, p1)
            else:
                values[name] = u
        elif kind == K_STRING:
            _take(p, &pos, end, column[1], &u)
            size = <Py_ssize_t>u
            _need(pos, size, end)
            values[name] = _string(p, pos, size, column[2])
            pos += size
        elif kind == K_DOUBLE:
            _need(pos, 8, end)
            memcpy(&d, p + pos, 8)
            values[name] = d
            pos += 8
        elif kind == K_FLOAT:
            _need(pos, 4, end)
            memcpy(&f, p + pos, 4)
            values[name] = <double>f
            pos += 4
        elif kind == K_DECIMAL:
            values[name], pos = _decimal(p, pos, end, column[1], column[2])
        elif kind == K_DATETIME2:
            value, pos = _datetime2(p, pos, end, column[1])
            values[name] = value
            if value is None:
                sources[name] = _OUT_OF_DATETIME2
        elif kind == K_TIMESTAMP2:
            values[name], pos = _timestamp2(p, pos, end, column[1])
        elif kind == K_DATE:
            _need(pos, 3, end)
            u = _le(p + pos, 3)
            pos += 3
            if (u >> 9) & 0x7FFF and (u >> 5) & 15 and u & 31:
                values[name] = date_new((u >> 9) & 0x7FFF, (u >> 5) & 15, u & 31)
            else:
                sources[name] = _OUT_OF_DATE
        elif kind == K_YEAR:
            _need(pos, 1, end)
            values[name] = p[pos] + 1900
            pos += 1
        else:
            value, pos, source = _readers[kind](data, pos, column[1], column[2])
            values[name] = value
            if value is None:
                sources[name] = source
            if pos > end:
                raise ValueError("a row runs past the event's end")
    return values, sources, pos


cdef inline object _string(const unsigned char *p, Py_ssize_t pos, Py_ssize_t size,
                           object encoding):
    """A string column's value: its bytes decoded with ``encoding`` (None: the bytes, and
    b'' as '', as the twin says why)."""
    if encoding is None:
        return PyBytes_FromStringAndSize(<const char *>p + pos, size) if size else ""
    if encoding == _UTF8:
        return PyUnicode_DecodeUTF8(<const char *>p + pos, size, NULL)
    return PyBytes_FromStringAndSize(<const char *>p + pos, size).decode(encoding)


cdef tuple _decimal(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, int precision,
                    int scale):
    """A packed DECIMAL as the twin builds it (its text, then Decimal)."""
    cdef char text[96]
    cdef Py_ssize_t after = _decimal_text(p, pos, end, precision, scale, text)
    return _Decimal(text[:strlen(text)].decode("ascii")), after


cdef Py_ssize_t _decimal_text(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                              int precision, int scale, char *text) except -1:
    """The twin's text of a packed DECIMAL (sign, digits as stored, '.', the scale's
    digits) into ``text`` (96 bytes, NUL-ended); the position after it."""
    cdef int whole = precision - scale, head = _dig2bytes[whole % 9]
    cdef int tail = _dig2bytes[scale % 9], i, n
    cdef Py_ssize_t size = whole // 9 * 4 + head + scale // 9 * 4 + tail, at = 0
    cdef unsigned char raw[40]
    cdef int negative
    if size > 40 or size < 1:
        raise ValueError(f"DECIMAL({precision},{scale}) of {size} bytes")
    _need(pos, size, end)
    memcpy(raw, p + pos, size)
    negative = not raw[0] & 0x80
    raw[0] ^= 0x80
    if negative:
        for i in range(size):
            raw[i] ^= 0xFF
    n = 1 if negative else 0
    text[0] = b'-'
    if head:
        n += snprintf(text + n, 96 - n, "%u", <unsigned int>_be(raw, head))
        at = head
    for i in range(whole // 9):
        n += snprintf(text + n, 96 - n, "%09u", <unsigned int>_be(raw + at, 4))
        at += 4
    text[n] = b'.'
    n += 1
    for i in range(scale // 9):
        n += snprintf(text + n, 96 - n, "%09u", <unsigned int>_be(raw + at, 4))
        at += 4
    if tail:
        n += snprintf(text + n, 96 - n, "%0*u", <int>(scale % 9),
                      <unsigned int>_be(raw + at, tail))
    text[n] = 0
    return pos + size


cdef inline int _fraction(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                          int fsp) except -1:
    cdef int n = (fsp + 1) // 2, value, i
    if not n:
        return 0
    _need(pos, n, end)
    value = <int>_be(p + pos, n)
    if fsp % 2:
        value //= 10
    for i in range(6 - fsp):
        value *= 10
    return value


cdef Py_ssize_t _datetime2_fields(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                                  int fsp, int *f) except -1:
    """A DATETIME2's year, month, day, hour, minute, second and microseconds into ``f``
    as stored (not checked); the position after it."""
    _need(pos, 5, end)
    cdef uint64_t packed = _be(p + pos, 5)
    cdef int year_month = (packed >> 22) & 0x1FFFF
    f[6] = _fraction(p, pos + 5, end, fsp)
    f[0], f[1], f[2] = year_month // 13, year_month % 13, (packed >> 17) & 31
    f[3], f[4], f[5] = (packed >> 12) & 31, (packed >> 6) & 63, packed & 63
    return pos + 5 + (fsp + 1) // 2


cdef tuple _datetime2(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, int fsp):
    cdef int f[7]
    after = _datetime2_fields(p, pos, end, fsp, f)
    try:
        value = datetime_new(f[0], f[1], f[2], f[3], f[4], f[5], f[6], None)
    except ValueError:
        return None, after
    return value, after


cdef tuple _timestamp2(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end, int fsp):
    cdef int f[7]
    after = _timestamp2_fields(p, pos, end, fsp, f)
    return datetime_new(f[0], f[1], f[2], f[3], f[4], f[5], f[6], None), after


cdef Py_ssize_t _timestamp2_fields(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                                   int fsp, int *f) except -1:
    """A TIMESTAMP2's UTC date and time into ``f`` (as ``_datetime2_fields``)."""
    _need(pos, 4, end)
    cdef int64_t seconds = <uint32_t>_be(p + pos, 4)  # unsigned: MariaDB 11.5+ to 2106
    cdef int micros = _fraction(p, pos + 4, end, fsp)
    cdef int64_t days = seconds // 86400 if seconds >= 0 else -((-seconds + 86399) // 86400)
    cdef int64_t rest = seconds - days * 86400
    cdef int64_t z = days + 719468, era, doe, yoe, doy, mp, y, m, d
    era = (z if z >= 0 else z - 146096) // 146097
    doe = z - era * 146097
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    y = yoe + era * 400
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    if m <= 2:
        y += 1
    f[0], f[1], f[2], f[3] = y, m, d, rest // 3600
    f[4], f[5], f[6] = rest // 60 % 60, rest % 60, micros
    return pos + 4 + (fsp + 1) // 2


# -- the ``###`` line of a row (``rowtext.row_line``'s twin) ------------------------------

cdef object _literal = None         # rowtext.literal
cdef object _string_literal = None  # rowtext._string_literal
cdef object _cols_bitmap = None     # NONE_SOURCE.COLS_BITMAP
cdef object _bit_type = None        # FIELD_TYPE.BIT
cdef object _timestamps = frozenset()  # the TIMESTAMP types (a "+00:00" zone)
cdef Py_ssize_t _row_cap = 0, _value_cap = 0


def configure_text(literal, string_literal, cols_bitmap, bit_type, timestamps,
                   Py_ssize_t row_cap, Py_ssize_t value_cap):
    """Hand over what ``row_line`` calls for the values it does not write itself."""
    global _literal, _string_literal, _cols_bitmap, _bit_type, _timestamps, _row_cap
    global _value_cap
    _literal, _string_literal, _cols_bitmap = literal, string_literal, cols_bitmap
    _bit_type, _timestamps = bit_type, frozenset(timestamps)
    _row_cap, _value_cap = row_cap, value_cap


def row_line(list parts, dict labels, dict columns, unsigned_unknown):
    """``rowtext.row_line``, the same text: integers, plain ASCII words, DECIMALs and
    DATETIMEs / TIMESTAMPs written here (as ``rowtext.literal`` writes them), every other
    value by ``rowtext.literal`` / ``_string_literal``."""
    cdef list out = []
    cdef Py_ssize_t size = 0, left = 0
    cdef dict values
    cdef str text, pair, head
    for part in parts:
        left += len(<dict>part[1])
    for part in parts:
        head, values, sources = part
        out.append(head)
        size += len(head) + 1
        for key, value in values.items():
            left -= 1
            if value is None:
                source = sources.get(key)
                if source == _cols_bitmap:
                    continue  # not in this row image
                text = _literal(None, columns.get(key), source)
            elif type(value) is int and key not in unsigned_unknown:
                text = str(value)
            elif type(value) is str and getattr(columns.get(key), "type", None) != _bit_type:
                if len(<str>value) <= _value_cap and (<str>value).isalnum() \
                        and (<str>value).isascii():
                    text = "'" + <str>value + "'"
                else:
                    text = _string_literal(value)
            elif type(value) is _Decimal:
                text = format(value, "f")
            elif type(value) is _datetime:
                zone = "+00:00" if getattr(columns.get(key), "type", None) in _timestamps \
                    else ""
                text = "'" + value.isoformat(" ") + zone + "'"
            else:
                text = _literal(value, columns.get(key), None, key in unsigned_unknown)
            pair = f"{labels.get(key, key)}={text}"
            if size + len(pair) > _row_cap:
                out.append(f"... ({left + 1} more values)")
                return " ".join(out)
            out.append(pair)
            size += len(pair) + 1
    return " ".join(out)


# -- the ``###`` lines of a whole rows event (``rowtext.rows_text``'s twin) ----------------
# Straight from the event's bytes into one UTF-8 buffer: no value object for integers,
# plain ASCII strings, DECIMALs, DATETIMEs and TIMESTAMPs; every other value read by the
# twin's readers and written by ``rowtext.literal``.

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL

cdef struct Buffer:
    char *data
    Py_ssize_t size
    Py_ssize_t cap

cdef dict _ascii_safe = {}  # encoding -> whether printable ASCII bytes read as themselves
cdef bytes _PRINTABLE = bytes(range(0x20, 0x7F))
cdef int _days_in[13]
_days_in[:] = [0, 31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31]


cdef int _put(Buffer *b, const char *text, Py_ssize_t n) except -1:
    cdef Py_ssize_t cap
    cdef char *grown
    if b.size + n > b.cap:
        cap = max(2 * b.cap, b.size + n + 65536)
        grown = <char *>realloc(b.data, cap)
        if grown == NULL:
            raise MemoryError()
        b.data, b.cap = grown, cap
    memcpy(b.data + b.size, text, n)
    b.size += n
    return 0


cdef Py_ssize_t _put_str(Buffer *b, str text) except -1:
    """Write ``text`` as UTF-8; its length in characters."""
    cdef Py_ssize_t n
    cdef const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n)
    _put(b, utf8, n)
    return len(text)


cdef bint _plain(const unsigned char *p, Py_ssize_t size, object encoding):
    """Whether a string's bytes are its literal as they are: printable ASCII without
    ``\\`` or ``'``, at most VALUE_CAP of them, in an encoding that reads them as ASCII."""
    cdef Py_ssize_t i
    cdef unsigned char c
    if size > _value_cap:
        return False
    for i in range(size):
        c = p[i]
        if c < 0x20 or c > 0x7E or c == 0x27 or c == 0x5C:
            return False
    safe = _ascii_safe.get(encoding)
    if safe is None:
        try:
            safe = encoding is None or _PRINTABLE.decode(encoding) == _PRINTABLE.decode("ascii")
        except (LookupError, UnicodeError):
            safe = False
        _ascii_safe[encoding] = safe
    return safe


cdef bint _valid_datetime(int *f):
    """Whether the fields make a datetime (what ``datetime_new`` accepts)."""
    if f[0] < 1 or f[0] > 9999 or f[1] < 1 or f[1] > 12 or f[2] < 1:
        return False
    leap = f[1] == 2 and f[0] % 4 == 0 and (f[0] % 100 != 0 or f[0] % 400 == 0)
    if f[2] > _days_in[f[1]] + leap:
        return False
    return f[3] < 24 and f[4] < 60 and f[5] < 60 and 0 <= f[6] < 1000000


cdef int _datetime_text(char *text, int *f, bint zone):
    """``'YYYY-MM-DD HH:MM:SS[.ffffff][+00:00]'`` (``isoformat(" ")``'s shape) into
    ``text``; its length."""
    cdef int n = snprintf(text, 48, "'%04d-%02d-%02d %02d:%02d:%02d", f[0], f[1], f[2],
                          f[3], f[4], f[5])
    if f[6]:
        n += snprintf(text + n, 48 - n, ".%06d", f[6])
    if zone:
        n += snprintf(text + n, 48 - n, "+00:00")
    text[n] = b"'"
    return n + 1


cdef int _decimal_literal(char *text, const char *raw):
    """``format(Decimal(raw), "f")`` of the stored text ``raw`` (``_decimal_text``):
    leading zeros dropped, no '.' without a scale; its length."""
    cdef int n = 0, i = 0
    if raw[0] == b"-":
        text[n] = b"-"
        n += 1
        i = 1
    while raw[i] == b"0" and raw[i + 1] != b"." and raw[i + 1] != 0:
        i += 1
    if raw[i] == b".":  # no integer digits: a zero
        text[n] = b"0"
        n += 1
    while raw[i] != 0:
        if raw[i] == b"." and raw[i + 1] == 0:
            break
        text[n] = raw[i]
        n += 1
        i += 1
    return n


cdef Py_ssize_t _text_image(Buffer *b, bytes data, Py_ssize_t pos, Py_ssize_t end,
                            tuple image, str head, tuple labels, tuple columns,
                            tuple unknown, Py_ssize_t *size, Py_ssize_t *left,
                            bint *cut) except -1:
    """One row image (``Plan.image``) of a row's line, as ``rowtext.row_line`` writes it
    (``size``: the characters it counts; ``left``: the values not yet seen; ``cut``: past
    ROW_CAP, the rest read and not written); the position after it."""
    cdef tuple chosen = <tuple>image[0], shown = <tuple>image[4], column
    cdef Py_ssize_t width = image[3], nulls = pos, i, j = 0, n, chars, length
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(data)
    cdef char text[128]
    cdef char stored[96]
    cdef int kind, f[7]
    cdef uint64_t u
    cdef int64_t v
    cdef str label, literal
    _need(pos, width, end)
    pos += width
    if not cut[0]:
        if size[0]:
            _put(b, b" ", 1)
        size[0] += _put_str(b, head) + 1
    for i in range(len(shown)):
        left[0] -= 1
        if not shown[i]:
            continue  # not in this row image
        column = <tuple>chosen[j]
        literal, n = None, 0
        if p[nulls + (j >> 3)] >> (j & 7) & 1:
            memcpy(text, b"NULL", 4)
            n = 4
            j += 1
        else:
            j += 1
            kind = column[0]
            if kind == K_INT:
                _take(p, &pos, end, column[1], &u)
                if column[2]:
                    v = _signed(u, column[1])
                    if v < 0 and unknown[i]:  # as mysqlbinlog: the unsigned reading too
                        n = snprintf(text, 128, "%lld (%llu)", <long long>v,
                                     <unsigned long long>u)
                    else:
                        n = snprintf(text, 128, "%lld", <long long>v)
                else:
                    n = snprintf(text, 128, "%llu", <unsigned long long>u)
            elif kind == K_STRING:
                _take(p, &pos, end, column[1], &u)
                length = <Py_ssize_t>u
                _need(pos, length, end)
                if _plain(p + pos, length, column[2]):
                    _put_quoted(b, size, cut, labels[i], p + pos, length, left[0])
                    pos += length
                    continue
                value = _string(p, pos, length, column[2])
                pos += length
                literal = _literal(value, columns[i], None, unknown[i])
            elif kind == K_DECIMAL:
                pos = _decimal_text(p, pos, end, column[1], column[2], stored)
                n = _decimal_literal(text, stored)
            elif kind == K_DATETIME2:
                pos = _datetime2_fields(p, pos, end, column[1], f)
                if _valid_datetime(f):
                    n = _datetime_text(text, f, False)
                else:
                    literal = _literal(None, columns[i], _OUT_OF_DATETIME2, False)
            elif kind == K_TIMESTAMP2:
                pos = _timestamp2_fields(p, pos, end, column[1], f)
                if not _valid_datetime(f):
                    raise ValueError("a TIMESTAMP out of range")
                n = _datetime_text(text, f, True)
            else:
                value, pos, source = _readers[kind](data, pos, column[1], column[2])
                if pos > end:
                    raise ValueError("a row runs past the event's end")
                literal = _literal(value, columns[i], source,
                                   unknown[i] if value is not None else False)
        if cut[0]:
            continue
        label = <str>labels[i]
        chars = len(label) + 1 + (len(literal) if literal is not None else n)
        if size[0] + chars > _row_cap:
            _cut(b, left[0], cut)
            continue
        _put(b, b" ", 1)
        _put_str(b, label)
        _put(b, b"=", 1)
        if literal is not None:
            _put_str(b, literal)
        else:
            _put(b, text, n)
        size[0] += chars + 1
    return pos


cdef int _put_quoted(Buffer *b, Py_ssize_t *size, bint *cut, str label,
                     const unsigned char *value, Py_ssize_t n, Py_ssize_t left) except -1:
    """`` label='value'`` of a plain string (``_plain``), or the cut."""
    cdef Py_ssize_t chars
    if cut[0]:
        return 0
    chars = len(label) + 3 + n
    if size[0] + chars > _row_cap:
        return _cut(b, left, cut)
    _put(b, b" ", 1)
    _put_str(b, label)
    _put(b, b"='", 2)
    _put(b, <const char *>value, n)
    _put(b, b"'", 1)
    size[0] += chars + 1
    return 0


cdef int _cut(Buffer *b, Py_ssize_t left, bint *cut) except -1:
    """The end of a line past ROW_CAP: `` ... (N more values)``."""
    cdef char text[64]
    cdef int n = snprintf(text, 64, " ... (%lld more values)", <long long>(left + 1))
    _put(b, text, n)
    cut[0] = True
    return 0


def rows_text(bytes data, Py_ssize_t pos, Py_ssize_t end, tuple before, tuple after,
              tuple heads, tuple labels, tuple columns, tuple unknown):
    """(the ``###`` lines of the row images from ``pos`` to ``end``, UTF-8, each ending
    with a newline; the position after them): see the twin, ``rowtext.rows_text``."""
    cdef Buffer b
    cdef Py_ssize_t size, left, count = len(labels)
    cdef bint cut
    if end > PyBytes_GET_SIZE(data):
        raise ValueError("the rows end past the event")
    b.data, b.size, b.cap = NULL, 0, 0
    try:
        while pos < end:
            size, cut = 0, False
            left = count if after is None else 2 * count
            pos = _text_image(&b, data, pos, end, before, heads[0], labels, columns,
                              unknown, &size, &left, &cut)
            if after is not None:
                pos = _text_image(&b, data, pos, end, after, heads[1], labels, columns,
                                  unknown, &size, &left, &cut)
            _put(&b, b"\n", 1)
        return PyBytes_FromStringAndSize(b.data, b.size), pos
    finally:
        free(b.data)


# -- a row image for the change table (``changes._image``'s twin) -------------------------

cdef object _stored_columns = None  # changes._stored_columns
cdef object _encode_value = None    # changes.encode_value
cdef object _as_stored = None       # changes._as_stored
cdef object _image_absent = None    # NONE_SOURCE.COLS_BITMAP
cdef object _empty_set = None       # NONE_SOURCE.EMPTY_SET


def configure_json(stored_columns, encode_value, as_stored, cols_bitmap, empty_set):
    """Hand over what ``json_image`` calls for the values it does not write itself."""
    global _stored_columns, _encode_value, _as_stored, _image_absent, _empty_set
    _stored_columns, _encode_value, _as_stored = stored_columns, encode_value, as_stored
    _image_absent, _empty_set = cols_bitmap, empty_set


def json_image(dict values, dict none_sources, dict columns):
    """``changes._image``, the same dict: plain values, DECIMALs and DATETIMEs written
    here (as ``changes.encode_value`` writes them), the rest by ``encode_value``."""
    cdef dict image = {}
    stored = _stored_columns(columns)
    for name, value in values.items():
        if value is None:
            source = none_sources.get(name)
            if source == _image_absent:
                continue  # not in this row image
            image[name] = [] if source == _empty_set else None
        elif name in stored:
            column = columns.get(name)
            image[name] = _encode_value(_as_stored(value, column), column)
        elif type(value) is int or type(value) is str or type(value) is float:
            image[name] = value
        elif type(value) is _Decimal:
            image[name] = format(value, "f")
        elif type(value) is _datetime:  # a TIMESTAMP is a stored column: no zone here
            image[name] = value.isoformat()
        else:
            column = columns.get(name)
            image[name] = _encode_value(value, column)
    return image


# -- the rows of a rows event counted, not decoded (``rowcount.walk_rows``'s twin) -------

def walk_rows(view, Py_ssize_t pos, Py_ssize_t end, plan_of, tuple presents):
    """The number of rows from ``pos`` to ``end``: see the twin, ``rowcount.walk_rows``."""
    cdef const unsigned char[:] v = view
    cdef Py_ssize_t size = v.shape[0], rows = 0, nb
    cdef int prefix
    cdef list walks = [((bin(present).count("1") + 7) // 8, present, {})
                       for present in presents]
    cdef tuple plan, step
    cdef dict plans
    while pos < end:
        for walk in walks:
            nb, plans = walk[0], <dict>walk[2]
            if pos + nb > size:
                raise IndexError("a row runs past the event")
            nulls = _le(&v[pos], nb) if nb <= 8 else \
                int.from_bytes(bytes(v[pos:pos + nb]), "little")
            plan = plans.get(nulls)
            if plan is None:
                plan = plans[nulls] = plan_of(walk[1], nulls)
            pos += nb
            for step in <tuple>plan[0]:
                pos += <Py_ssize_t>step[0]
                prefix = step[1]
                if pos + prefix > size:
                    raise IndexError("a row runs past the event")
                pos += prefix + <Py_ssize_t>_le(&v[pos], prefix)
            pos += <Py_ssize_t>plan[1]
        rows += 1
    if pos != end:
        raise ValueError("a row runs past the event's end")
    return rows


# -- a flat row image as JSON text (``changes._json``'s twin) ----------------------------

cdef object _json_fallback = None  # changes' one C encoder of the json module


def configure_image_json(fallback):
    """Hand over the encoder ``image_json`` leaves every other object to."""
    global _json_fallback
    _json_fallback = fallback


cdef bint _json_plain(const char *text, Py_ssize_t n):
    """Whether UTF-8 ``text`` is its own JSON string body (no ``"``, ``\\`` nor control
    character: what the json module writes as it is with ensure_ascii off)."""
    cdef Py_ssize_t i
    cdef unsigned char c
    for i in range(n):
        c = <unsigned char>text[i]
        if c < 0x20 or c == 0x22 or c == 0x5C:
            return False
    return True


cdef int _json_string(Buffer *b, str text) except -1:
    cdef Py_ssize_t n
    cdef const char *utf8 = PyUnicode_AsUTF8AndSize(text, &n)
    if _json_plain(utf8, n):
        _put(b, b'"', 1)
        _put(b, utf8, n)
        _put(b, b'"', 1)
    else:
        _put_str(b, "".join(_json_fallback(text, 0)))
    return 0


def image_json(dict image):
    """``changes._json`` of a row image, the same text: a dict of str keys to str, int
    (not bool), None or lists of str written here; anything else, the whole image by the
    json module's encoder (``configure_image_json``)."""
    cdef Buffer b
    cdef char number[32]
    cdef int n
    cdef bint first = True
    for key, value in image.items():
        if type(key) is not str or not (value is None or type(value) is str or
                                        (type(value) is int and -(1 << 62) < value < (1 << 62))
                                        or type(value) is list):
            return "".join(_json_fallback(image, 0))
    b.data, b.size, b.cap = NULL, 0, 0
    try:
        _put(&b, b"{", 1)
        for key, value in image.items():
            if not first:
                _put(&b, b",", 1)
            first = False
            _json_string(&b, <str>key)
            _put(&b, b":", 1)
            if value is None:
                _put(&b, b"null", 4)
            elif type(value) is str:
                _json_string(&b, <str>value)
            elif type(value) is int:
                n = snprintf(number, 32, "%lld", <long long>value)
                _put(&b, number, n)
            else:
                _put_str(&b, "".join(_json_fallback(value, 0)))
        _put(&b, b"}", 1)
        return PyUnicode_DecodeUTF8(b.data, b.size, NULL)
    except UnicodeEncodeError:  # a lone surrogate, which the json module writes as it is
        return "".join(_json_fallback(image, 0))
    finally:
        free(b.data)
