# The compiled row loop's C parts that the other compiled twins (``_rowtext``,
# ``_changejson``, ``_rowcount``) take with ``cimport``: the column kinds, the growing
# text buffer, the readers of a value's bytes. Declared here, defined in _rowloop.pyx
# (the inline ones here, copied into each module).

from libc.stdint cimport int64_t, uint64_t

cdef extern from "Python.h":
    const char *PyUnicode_AsUTF8AndSize(object text, Py_ssize_t *size) except NULL

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


cdef struct Buffer:
    char *data
    Py_ssize_t size
    Py_ssize_t cap


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


cdef inline int _plans(object before, object after) except -1:
    """TypeError unless the image plans are tuples (``rowdecode.ImagePlan``s, or None
    for the second), which the loops then read by index."""
    if not isinstance(before, tuple) or not (after is None or isinstance(after, tuple)):
        raise TypeError("the image plans are ImagePlans (tuples)")
    return 0


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


cdef int _put(Buffer *b, const char *text, Py_ssize_t n) except -1
cdef Py_ssize_t _put_str(Buffer *b, str text) except -1
cdef object _string(const unsigned char *p, Py_ssize_t pos, Py_ssize_t size, object encoding)
cdef tuple _read_other(int kind, bytes data, Py_ssize_t pos, object p1, object p2)
cdef Py_ssize_t _decimal_text(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                              int precision, int scale, char *text) except -1
cdef int _decimal_literal(char *text, const char *raw)
cdef Py_ssize_t _datetime2_fields(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                                  int fsp, int *f) except -1
cdef Py_ssize_t _timestamp2_fields(const unsigned char *p, Py_ssize_t pos, Py_ssize_t end,
                                   int fsp, int *f) except -1
cdef bint _valid_datetime(int *f)
cdef bint _ascii_codec(object encoding) except -1
