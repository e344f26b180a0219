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
from libc.stdlib cimport realloc
from libc.string cimport memcpy, strlen

import datetime
import decimal
import sys

import_datetime()
if sys.byteorder != "little":  # FLOAT and DOUBLE are copied as they lie
    raise ImportError("the compiled row loop reads FLOAT and DOUBLE on little-endian hosts")

# the version of the twins: ``rowloop.TWIN`` must be the same
TWIN = 9

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


def read_rows(bytes data, Py_ssize_t pos, Py_ssize_t end, before, after):
    """([row, ...], position after) of the row images from ``pos`` to ``end``: see the
    twin's ``read_rows``."""
    _plans(before, after)
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


cdef tuple _image(bytes data, Py_ssize_t pos, Py_ssize_t end, object image_plan):
    cdef tuple image = <tuple>image_plan  # an ImagePlan (a tuple; checked by the caller)
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


cdef object _string(const unsigned char *p, Py_ssize_t pos, Py_ssize_t size,
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


# -- what the other compiled twins share (``_rowloop.pxd``) ---------------------------

cdef dict _ascii_safe = {}  # codec -> whether printable ASCII bytes read as themselves
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


cdef bint _ascii_codec(object encoding) except -1:
    """Whether a string column's codec reads printable ASCII bytes as themselves (None:
    its bytes are kept, which the ``###`` lines print as they are)."""
    safe = _ascii_safe.get(encoding)
    if safe is None:
        try:
            safe = encoding is None or _PRINTABLE.decode(encoding) == _PRINTABLE.decode("ascii")
        except (LookupError, UnicodeError):
            safe = False
        _ascii_safe[encoding] = safe
    return safe


cdef tuple _read_other(int kind, bytes data, Py_ssize_t pos, object p1, object p2):
    """(value, position after, none source) of a kind read by the twin's own reader."""
    return _readers[kind](data, pos, p1, p2)


cdef bint _valid_datetime(int *f):
    """Whether the fields make a datetime (what ``datetime_new`` accepts)."""
    if f[0] < 1 or f[0] > 9999 or f[1] < 1 or f[1] > 12 or f[2] < 1:
        return False
    leap = f[1] == 2 and f[0] % 4 == 0 and (f[0] % 100 != 0 or f[0] % 400 == 0)
    if f[2] > _days_in[f[1]] + leap:
        return False
    return f[3] < 24 and f[4] < 60 and f[5] < 60 and 0 <= f[6] < 1000000


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
