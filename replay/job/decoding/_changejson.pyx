# cython: language_level=3, boundscheck=False, wraparound=False, initializedcheck=False
"""The compiled twin of ``replay.job.decoding.changejson`` (optional: ``changejson``
loads it through ``mysqlbackup.speedups.load_twin``): a row image for the change table
(``json_image``), a flat image as JSON text (``image_json``) and a rows event's changes
as JSON straight from its bytes (``rows_json``), the same text; ``tests/test_rowdecode.py``
and ``tests/test_rowjson.py`` hold them to the twin."""

from cpython.bytes cimport PyBytes_AS_STRING, PyBytes_GET_SIZE
from cpython.unicode cimport PyUnicode_DecodeUTF8
from libc.stdint cimport uint64_t
from libc.stdio cimport snprintf
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy

from replay.job.decoding._rowloop cimport (K_DATE, K_DATETIME2, K_DECIMAL, K_DOUBLE,
                                           K_FLOAT, K_INT, K_STRING, Buffer,
                                           PyUnicode_AsUTF8AndSize, _ascii_codec,
                                           _datetime2_fields, _decimal_literal,
                                           _decimal_text, _le, _need, _plans, _put,
                                           _put_str, _signed, _string, _take,
                                           _valid_datetime)

import datetime
import decimal

# the version of the twins: ``changejson.TWIN`` must be the same (bump both on a change)
TWIN = 1

cdef object _Decimal = decimal.Decimal
cdef object _datetime = datetime.datetime

# -- a row image for the change table (``changejson.image_values``'s twin) -------------------------

cdef object _stored_columns = None  # changejson.stored_columns
cdef object _encode_value = None    # changejson.encode_value
cdef object _as_stored = None       # changejson.as_stored
cdef object _image_absent = None    # NONE_SOURCE.COLS_BITMAP
cdef object _empty_set = None       # NONE_SOURCE.EMPTY_SET


def configure_json(stored_columns, encode_value, as_stored, cols_bitmap, empty_set):
    """Hand over what ``json_image`` calls for the values it does not write itself."""
    global _stored_columns, _encode_value, _as_stored, _image_absent, _empty_set
    _stored_columns, _encode_value, _as_stored = stored_columns, encode_value, as_stored
    _image_absent, _empty_set = cols_bitmap, empty_set


def json_image(dict values, dict none_sources, dict columns):
    """``changejson.image_values``, the same dict: plain values, DECIMALs and DATETIMEs written
    here (as ``changejson.encode_value`` writes them), the rest by ``encode_value``."""
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


# -- a flat row image as JSON text (``changejson.to_json``'s twin) ----------------------------

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
    """``changejson.to_json`` of a row image, the same text: a dict of str keys to str, int
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


# -- a rows event's changes as JSON text, straight from its bytes ------------------------
# (``changes``' row dicts, ``_image``, ``_json`` and ``_key`` for a table of plain columns:
# the same text, no value object for integers, DECIMALs, DATETIMEs and DATEs)

cdef inline bint _json_ascii(const unsigned char *p, Py_ssize_t n) noexcept:
    """Whether bytes are printable ASCII without a double quote or a backslash: a JSON
    string's body as they are (the json module escapes nothing else of them)."""
    cdef Py_ssize_t i
    cdef unsigned char c
    for i in range(n):
        c = p[i]
        if c < 0x20 or c > 0x7E or c == 0x22 or c == 0x5C:
            return False
    return True


cdef bint _ascii_reads(object encoding) except -1:
    """Whether a column's codec reads printable ASCII bytes as themselves (None: the
    bytes are kept as bytes, never text)."""
    return encoding is not None and _ascii_codec(encoding)


cdef int _date_text(Buffer *b, int *f, int fields) except -1:
    """``"YYYY-MM-DD"`` (``fields`` 3) or ``"YYYY-MM-DDTHH:MM:SS[.ffffff]"`` (7), as
    ``isoformat()`` writes them, quoted."""
    cdef char text[48]
    cdef int n = snprintf(text, 48, "\"%04d-%02d-%02d", f[0], f[1], f[2])
    if fields == 7:
        n += snprintf(text + n, 48 - n, "T%02d:%02d:%02d", f[3], f[4], f[5])
        if f[6]:
            n += snprintf(text + n, 48 - n, ".%06d", f[6])
    text[n] = b'"'
    _put(b, text, n + 1)
    return 0


cdef bint _json_value(Buffer *b, bytes data, const unsigned char *p, Py_ssize_t *pos,
                      Py_ssize_t end, tuple column) except -1:
    """The JSON of one value (not NULL) of ``column`` (a plan's), as ``changejson.image_values``
    then ``_json`` write it; False (nothing written) for a value not written here."""
    cdef int kind = column[0], f[7]
    cdef uint64_t u
    cdef double d
    cdef float fl
    cdef char text[128]
    cdef char stored[96]  # a DECIMAL as stored (``_decimal_text``)
    cdef int n
    if kind == K_INT:
        _take(p, pos, end, column[1], &u)
        if column[2]:
            n = snprintf(text, 128, "%lld", <long long>_signed(u, column[1]))
        else:
            n = snprintf(text, 128, "%llu", <unsigned long long>u)
        _put(b, text, n)
    elif kind == K_STRING:
        _take(p, pos, end, column[1], &u)
        _need(pos[0], <Py_ssize_t>u, end)
        if _json_ascii(p + pos[0], <Py_ssize_t>u) and _ascii_reads(column[2]):
            _put(b, b'"', 1)  # its bytes are its JSON string's, as they are
            _put(b, <const char *>p + pos[0], <Py_ssize_t>u)
            _put(b, b'"', 1)
            pos[0] += <Py_ssize_t>u
            return True
        value = _string(p, pos[0], <Py_ssize_t>u, column[2])
        pos[0] += <Py_ssize_t>u
        if type(value) is not str:
            return False
        _json_string(b, <str>value)
    elif kind == K_DECIMAL:
        pos[0] = _decimal_text(p, pos[0], end, column[1], column[2], stored)
        text[0] = b'"'
        n = 1 + _decimal_literal(text + 1, stored)
        text[n] = b'"'
        _put(b, text, n + 1)
    elif kind == K_DATETIME2:
        pos[0] = _datetime2_fields(p, pos[0], end, column[1], f)
        if _valid_datetime(f):
            _date_text(b, f, 7)
        else:  # the decoders' None: out of a datetime's range
            _put(b, b"null", 4)
    elif kind == K_DATE:
        _need(pos[0], 3, end)
        u = _le(p + pos[0], 3)
        pos[0] += 3
        f[0], f[1], f[2] = (u >> 9) & 0x7FFF, (u >> 5) & 15, u & 31
        if not (f[0] and f[1] and f[2]):
            _put(b, b"null", 4)
        else:
            f[3] = f[4] = f[5] = f[6] = 0
            if not _valid_datetime(f):
                return False  # the decoders raise: theirs to say
            _date_text(b, f, 3)
    elif kind == K_DOUBLE or kind == K_FLOAT:
        if kind == K_DOUBLE:
            _need(pos[0], 8, end)
            memcpy(&d, p + pos[0], 8)
            pos[0] += 8
        else:
            _need(pos[0], 4, end)
            memcpy(&fl, p + pos[0], 4)
            d = fl
            pos[0] += 4
        if d != d or d - d != 0:  # NaN or infinite: the json module refuses them
            return False
        _put_str(b, repr(d))
    else:
        return False
    return True


cdef Py_ssize_t _json_image(Buffer *b, bytes data, Py_ssize_t pos, Py_ssize_t end,
                            object image_plan, tuple keys, Py_ssize_t *spans, bint *ok) except -1:
    """One row image (``Plan.image``) as a JSON object into ``b``; ``spans``: where each
    column's value lies in ``b`` (start, length; start -1: not in the image); ``ok``
    False when a value is not written here. The position after it."""
    cdef tuple image = <tuple>image_plan  # an ImagePlan (a tuple; checked by the caller)
    cdef tuple chosen = <tuple>image[0], shown = <tuple>image[4]
    cdef Py_ssize_t width = image[3], nulls = pos, i, j = 0
    cdef const unsigned char *p = <const unsigned char *>PyBytes_AS_STRING(data)
    _need(pos, width, end)
    pos += width
    _put(b, b"{", 1)
    for i in range(len(shown)):
        spans[2 * i] = -1
        if not shown[i]:
            continue
        if j:
            _put(b, b",", 1)
        _put_str(b, <str>keys[i])
        spans[2 * i] = b.size
        if p[nulls + (j >> 3)] >> (j & 7) & 1:
            _put(b, b"null", 4)
        elif not _json_value(b, data, p, &pos, end, <tuple>chosen[j]):
            ok[0] = False
            return pos
        j += 1
        spans[2 * i + 1] = b.size - spans[2 * i]
    _put(b, b"}", 1)
    return pos


cdef object _key_json(Buffer *b, Buffer *k, Py_ssize_t *spans, tuple keys,
                      Py_ssize_t *pk, Py_ssize_t count):
    """``changejson.key_json``'s text from one image's ``spans`` in ``b`` (a key column
    not in it: null), written in ``k``."""
    cdef Py_ssize_t i, n
    k.size = 0
    _put(k, b"{", 1)
    for n in range(count):
        i = pk[n]
        if n:
            _put(k, b",", 1)
        _put_str(k, <str>keys[i])
        if spans[2 * i] < 0:
            _put(k, b"null", 4)
        else:
            _put(k, b.data + spans[2 * i], spans[2 * i + 1])
    _put(k, b"}", 1)
    return PyUnicode_DecodeUTF8(k.data, k.size, NULL)


cdef inline bint _has_all(Py_ssize_t *spans, Py_ssize_t *pk, Py_ssize_t count) noexcept:
    """Whether every key column is in the image ``spans`` describe."""
    cdef Py_ssize_t n
    for n in range(count):
        if spans[2 * pk[n]] < 0:
            return False
    return True


def rows_json(bytes data, Py_ssize_t pos, Py_ssize_t end, before, after,
              int op, tuple keys, tuple pk):
    """([(before, after, pk) JSON texts of each row], the position after them), or None
    when a value is not one written here (the caller decodes the event the usual way).
    ``before``: the plan of the event's first image, ``after`` an update's second (else
    None); ``op`` 0 insert, 1 update, 2 delete; ``keys`` each column's JSON name and
    colon; ``pk`` the key columns' indexes in key order (empty: no key)."""
    _plans(before, after)
    cdef Buffer b, k
    cdef Py_ssize_t count = len(keys), cut, keyed = len(pk), n
    cdef Py_ssize_t *first = <Py_ssize_t *>malloc((5 * count + 4) * sizeof(Py_ssize_t))
    cdef Py_ssize_t *second
    cdef Py_ssize_t *key  # the key columns' indexes
    cdef Py_ssize_t *key_spans
    cdef bint ok = True
    cdef list rows = []
    cdef object one, two, key_text
    if first == NULL:
        raise MemoryError()
    second, key = first + 2 * count + 2, first + 4 * count + 4
    if end > PyBytes_GET_SIZE(data) or keyed > count:
        free(first)
        raise ValueError("the rows end past the event")
    for n in range(keyed):
        key[n] = pk[n]
    b.data, b.size, b.cap = NULL, 0, 0
    k.data, k.size, k.cap = NULL, 0, 0
    try:
        while pos < end:
            b.size = 0
            pos = _json_image(&b, data, pos, end, before, keys, first, &ok)
            if not ok:
                return None
            cut = b.size
            one, two = PyUnicode_DecodeUTF8(b.data, cut, NULL), None
            if op == 1:
                pos = _json_image(&b, data, pos, end, after, keys, second, &ok)
                if not ok:
                    return None
                two = PyUnicode_DecodeUTF8(b.data + cut, b.size - cut, NULL)
            key_text = None
            if keyed:
                key_spans = first  # an insert's only image, or a delete's
                if op == 1 and _has_all(second, key, keyed):
                    key_spans = second
                elif op == 0 and not _has_all(first, key, keyed):
                    return None  # (the decoders' key of an insert without its key)
                key_text = _key_json(&b, &k, key_spans, keys, key, keyed)
            if op == 0:
                rows.append((None, one, key_text))
            elif op == 1:
                rows.append((one, two, key_text))
            else:
                rows.append((one, None, key_text))
        return rows, pos
    except UnicodeEncodeError:  # a lone surrogate: the json module's to write
        return None
    finally:
        free(b.data)
        free(k.data)
        free(first)
