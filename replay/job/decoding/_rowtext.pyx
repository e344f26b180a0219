# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The compiled twin of ``replay.job.decoding.rowtext`` (optional: ``rowtext`` loads it
through ``mysqlbackup.speedups.load_twin`` and says whether it runs): a row's ``###``
line (``row_line``) and a whole rows event's lines straight from its bytes
(``rows_text``), the same text; ``tests/test_rowdecode.py`` holds them to the twin."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_FromStringAndSize, PyBytes_GET_SIZE
from libc.stdint cimport int64_t, uint64_t
from libc.stdio cimport snprintf
from libc.stdlib cimport free
from libc.string cimport memcpy

from replay.job.decoding._rowloop cimport (K_DATETIME2, K_DECIMAL, K_INT, K_STRING,
                                           K_TIMESTAMP2, Buffer, _ascii_codec,
                                           _datetime2_fields, _decimal_literal,
                                           _decimal_text, _need, _plans, _put, _put_str,
                                           _read_other, _signed, _string, _take,
                                           _timestamp2_fields, _valid_datetime)

import datetime
import decimal

from replay.job.decoding.rowloop import OUT_OF_DATETIME2

# the version of the twins: ``rowtext.TWIN`` must be the same (bump both on a change)
TWIN = 1

cdef object _Decimal = decimal.Decimal
cdef object _datetime = datetime.datetime
cdef object _OUT_OF_DATETIME2 = OUT_OF_DATETIME2

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

cdef bint _plain(const unsigned char *p, Py_ssize_t size, object encoding) except -1:
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
    return _ascii_codec(encoding)


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


cdef Py_ssize_t _text_image(Buffer *b, bytes data, Py_ssize_t pos, Py_ssize_t end,
                            object image_plan, str head, tuple labels, tuple columns,
                            tuple unknown, Py_ssize_t *size, Py_ssize_t *left,
                            bint *cut) except -1:
    """One row image (``Plan.image``) of a row's line, as ``rowtext.row_line`` writes it
    (``size``: the characters it counts; ``left``: the values not yet seen; ``cut``: past
    ROW_CAP, the rest read and not written); the position after it."""
    cdef tuple image = <tuple>image_plan  # an ImagePlan (a tuple; checked by the caller)
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
                value, pos, source = _read_other(kind, data, pos, column[1], column[2])
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


def rows_text(bytes data, Py_ssize_t pos, Py_ssize_t end, before, after,
              tuple heads, tuple labels, tuple columns, tuple unknown):
    """(the ``###`` lines of the row images from ``pos`` to ``end``, UTF-8, each ending
    with a newline; the position after them): see the twin, ``rowtext.rows_text``."""
    _plans(before, after)
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
