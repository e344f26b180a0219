# Included by _rowloop.pyx after _rowtext.pxi (its ``Buffer``): the change table's row
# images (``changes._image``'s twin) and a flat image as JSON text (``changes._json``'s).

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
