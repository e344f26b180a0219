"""MySQL's binary JSON -> its JSON text, as MySQL prints it (pure).

A MySQL JSON column (type 245 in a TABLE_MAP) holds a value in MySQL's binary
format (``sql-common/json_binary.cc``): a type byte, then the value. Objects
and arrays come in a small (2-byte offsets and sizes) and a large (4-byte)
form: element count, size in bytes, key entries (objects: offset, 2-byte
length), value entries (type byte, then the value itself when it is a literal or
a 16-bit integer, or a 32-bit integer in the large form; else its offset from
the start of the container), then the keys and the values. Scalars: literals
(null/true/false), signed and unsigned 16/32/64-bit integers, doubles (8 bytes,
little-endian), strings (a variable-length size: 7 bits a byte, low bits first)
and opaque values (a MySQL column type byte, a variable-length size, the bytes).

``json_text`` gives the text ``SELECT col`` shows (``Json_wrapper::to_string``
of ``sql-common/json_dom.cc``):

- objects ``{"k": v, ...}`` with their keys in stored order (MySQL keeps keys
  sorted by length, then bytes), arrays ``[v, ...]``, ", " and ": " between;
- strings double-quoted; '"' and '\\' escaped, \\b \\f \\n \\r \\t, any other byte
  up to 0x1f as \\u00xx (lower-case hex); everything else (UTF-8) as it is;
- integers in decimal, whatever their size (up to 18446744073709551615);
- doubles as ``my_gcvt`` writes them: the shortest digits that read back as the
  same double, in plain notation when 1e-15 <= |x| < 1e15 (and for 17 digits
  reaching past the point below 1e16: ``1234567890123456.8``), else as ``1e15``,
  ``1.5e-16`` (no '+', no leading zeros); ".0" added to a text with neither '.'
  nor 'e' (``1.0``, ``100000000000000.0``, ``-0.0``);
- opaque DECIMAL (type 246): its digits with the scale it was stored with
  (``1.50``), unquoted; opaque DATETIME (12) and TIMESTAMP (7):
  ``"YYYY-MM-DD HH:MM:SS.ffffff"``, DATE (10): ``"YYYY-MM-DD"``, TIME (11):
  ``"[-]HH:MM:SS.ffffff"`` (always six digits of fraction for those with a time);
  VAR_STRING (253): the bytes as a string; any other type (BLOB, BINARY, VARBINARY,
  BIT, ...): ``"base64:typeN:<base64>"`` (MySQL's base64: a newline after
  every 76 characters, escaped as \\n in the quoted text);
- an empty value (zero bytes: what MySQL stores for NULL in a NOT NULL column
  in non-strict mode) is the JSON null literal, as MySQL reads it.

Malformed bytes raise ``JsonBinaryError`` (a ``ValueError``), never a guess:
offsets and sizes outside their container, unknown type bytes, unknown
literals, strings that are not UTF-8, decimal digits over 9 a group, opaque
date/time values that are not 8 bytes. Nesting deeper than MySQL's 100 levels
is refused, and so is a value whose entries point into one another so that it
would print more nodes than its bytes can hold.
"""

import base64
import decimal
import re
import struct

from mysqlbackup.binlog.tablemap import decimal_digits, decimal_groups, decimal_size

SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY = 0x0, 0x1, 0x2, 0x3
LITERAL, INT16, UINT16, INT32, UINT32, INT64, UINT64 = 0x4, 0x5, 0x6, 0x7, 0x8, 0x9, 0xA
DOUBLE, STRING, OPAQUE = 0xB, 0xC, 0xF
LITERALS = {0x0: "null", 0x1: "true", 0x2: "false"}

# MySQL field types an opaque value may carry that print other than as base64
MYSQL_TYPE_TIMESTAMP, MYSQL_TYPE_DATE, MYSQL_TYPE_TIME = 7, 10, 11
MYSQL_TYPE_DATETIME, MYSQL_TYPE_NEWDECIMAL, MYSQL_TYPE_VAR_STRING = 12, 246, 253

MAX_DEPTH = 100  # JSON_DOCUMENT_MAX_DEPTH
_SCALARS = {INT16: struct.Struct("<h"), UINT16: struct.Struct("<H"),
            INT32: struct.Struct("<i"), UINT32: struct.Struct("<I"),
            INT64: struct.Struct("<q"), UINT64: struct.Struct("<Q")}
_DOUBLE = struct.Struct("<d")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\f": "\\f", "\n": "\\n",
            "\r": "\\r", "\t": "\\t"}
_SPECIAL = re.compile(r'["\\\x00-\x1f]')


class JsonBinaryError(ValueError):
    """Bytes that are not a valid MySQL binary JSON value."""


def json_text(data):
    """The JSON text MySQL prints for the binary JSON value ``data`` (bytes)."""
    data = bytes(data)
    if not data:
        return "null"
    return _Printer(len(data)).value(data[0], memoryview(data)[1:], 0)


class _Printer:
    """One value's walk: counts the nodes it prints (a bound against looping offsets)."""

    def __init__(self, size):
        self.budget = size + 1

    def value(self, type_, data, depth):
        """Text of a value of binary type ``type_`` stored at the start of ``data``."""
        self.budget -= 1
        if self.budget < 0:
            raise JsonBinaryError("value entries point into each other")
        if type_ in (SMALL_OBJECT, LARGE_OBJECT, SMALL_ARRAY, LARGE_ARRAY):
            if depth >= MAX_DEPTH:
                raise JsonBinaryError(f"nested deeper than {MAX_DEPTH} levels")
            return self.container(type_, data, depth + 1)
        return scalar_text(type_, data)

    def container(self, type_, data, depth):
        large = type_ in (LARGE_OBJECT, LARGE_ARRAY)
        is_object = type_ in (SMALL_OBJECT, LARGE_OBJECT)
        width = 4 if large else 2
        if len(data) < 2 * width:
            raise JsonBinaryError("container shorter than its header")
        count, size = _offset(data, 0, large), _offset(data, width, large)
        if size > len(data):
            raise JsonBinaryError(f"container of {size} bytes in {len(data)}")
        data = data[:size]
        key_entry, value_entry = width + 2, 1 + width
        keys_at = 2 * width
        values_at = keys_at + (count * key_entry if is_object else 0)
        if values_at + count * value_entry > size:
            raise JsonBinaryError(f"header of {count} entries larger than its "
                                  f"container ({size} bytes)")
        items = []
        for i in range(count):
            entry = values_at + i * value_entry
            text = self.element(data, entry, large, depth)
            if is_object:
                key_offset = _offset(data, keys_at + i * key_entry, large)
                key_length = struct.unpack_from("<H", data, keys_at + i * key_entry + width)[0]
                if key_offset < values_at + count * value_entry or \
                        key_offset + key_length > size:
                    raise JsonBinaryError(f"key {i} outside its object")
                text = quote(_utf8(data[key_offset:key_offset + key_length])) + ": " + text
            items.append(text)
        return ("{%s}" if is_object else "[%s]") % ", ".join(items)

    def element(self, data, entry, large, depth):
        type_ = data[entry]
        if type_ in (LITERAL, INT16, UINT16) or (large and type_ in (INT32, UINT32)):
            return scalar_text(type_, data[entry + 1:entry + (5 if large else 3)])
        offset = _offset(data, entry + 1, large)
        if offset < entry + (5 if large else 3) or offset >= len(data):
            raise JsonBinaryError(f"value offset {offset} outside its container")
        return self.value(type_, data[offset:], depth)


def scalar_text(type_, data):
    """Text of a scalar of binary type ``type_`` stored at the start of ``data``."""
    if type_ == LITERAL:
        if not data or data[0] not in LITERALS:
            raise JsonBinaryError(f"unknown literal {bytes(data[:1]).hex() or 'missing'}")
        return LITERALS[data[0]]
    if type_ in _SCALARS:
        form = _SCALARS[type_]
        _need(data, form.size, "integer")
        return str(form.unpack_from(data)[0])
    if type_ == DOUBLE:
        _need(data, 8, "double")
        return double_text(_DOUBLE.unpack_from(data)[0])
    if type_ == STRING:
        length, used = _varlen(data)
        _need(data, used + length, "string")
        return quote(_utf8(data[used:used + length]))
    if type_ == OPAQUE:
        _need(data, 1, "opaque value")
        length, used = _varlen(data[1:])
        _need(data, 1 + used + length, "opaque value")
        return opaque_text(data[0], bytes(data[1 + used:1 + used + length]))
    raise JsonBinaryError(f"unknown JSON type 0x{type_:02x}")


def opaque_text(field_type, data):
    """Text of an opaque value: a MySQL column type and its bytes."""
    if field_type == MYSQL_TYPE_NEWDECIMAL:
        return decimal_text(data)
    if field_type in (MYSQL_TYPE_DATETIME, MYSQL_TYPE_TIMESTAMP, MYSQL_TYPE_DATE,
                      MYSQL_TYPE_TIME):
        return '"' + temporal_text(field_type, data) + '"'
    if field_type == MYSQL_TYPE_VAR_STRING:
        return quote(_utf8(data))
    encoded = base64.b64encode(data).decode("ascii")
    lines = "\n".join(encoded[i:i + 76] for i in range(0, len(encoded), 76))
    return quote(f"base64:type{field_type}:{lines}")


def quote(text):
    """A string double-quoted and escaped as MySQL's ``double_quote`` does."""
    return '"' + _SPECIAL.sub(_escape, text) + '"'


def _escape(match):
    char = match.group()
    return _ESCAPES.get(char) or f"\\u{ord(char):04x}"


def double_text(value):
    """A double as MySQL prints it in JSON (``my_gcvt`` with the widest field, then
    ".0" when the text has neither '.' nor 'e')."""
    sign = "-" if str(value).startswith("-") else ""
    if value == 0:
        return sign + "0.0"
    # the shortest digits that read back as the same double (dtoa mode 0, as mode 4
    # with MY_GCVT_MAX_FIELD_WIDTH (34) significant digits gives for any double)
    digits, exponent = decimal.Decimal(repr(abs(value))).normalize().as_tuple()[1:]
    digits = "".join(map(str, digits))
    point = len(digits) + exponent  # the value is 0.DIGITS x 10**point
    if point >= -14 and (point <= 15 or point < len(digits)):  # MAX_DECPT_FOR_F_FORMAT 15
        if point <= 0:
            text = "0." + "0" * -point + digits
        elif point < len(digits):
            text = digits[:point] + "." + digits[point:]
        else:
            text = digits + "0" * (point - len(digits)) + ".0"
    else:
        mantissa = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
        text = f"{mantissa}e{point - 1}"
    return sign + text


def decimal_text(data):
    """An opaque DECIMAL: precision, scale, then MySQL's binary decimal
    (``decimal2bin``, read by ``tablemap.decimal_groups``), printed as
    ``decimal2string`` does (the stored scale)."""
    if len(data) < 2:
        raise JsonBinaryError("DECIMAL shorter than its precision and scale")
    precision, scale = data[0], data[1]
    if scale > precision:
        raise JsonBinaryError(f"DECIMAL({precision},{scale})")
    size = decimal_size(precision, scale)
    if len(data) - 2 != size or not size:
        raise JsonBinaryError(f"DECIMAL({precision},{scale}) of {len(data) - 2} bytes, "
                              f"not {size}")
    negative, whole, fraction, _ = decimal_groups(data, 2, precision, scale)
    for group, digits in zip(whole + fraction, decimal_digits(precision, scale)):
        if len(group) > digits:
            raise JsonBinaryError(f"DECIMAL digit group {int(group)} over {digits} digits")
    integer = "".join(whole).lstrip("0") or "0"
    return ("-" if negative else "") + integer + ("." + "".join(fraction) if scale else "")


def temporal_text(field_type, data):
    """An opaque DATE/TIME/DATETIME/TIMESTAMP (8 bytes: MySQL's packed longlong) as
    ``my_TIME_to_str`` with 6 decimals prints it."""
    if len(data) != 8:
        raise JsonBinaryError(f"packed date/time of {len(data)} bytes, not 8")
    packed = int.from_bytes(data, "little", signed=True)
    sign, packed = ("-" if packed < 0 else ""), abs(packed)
    fraction, hms = packed % (1 << 24), packed >> 24
    if field_type == MYSQL_TYPE_TIME:
        hour, minute, second = (hms >> 12) % (1 << 10), (hms >> 6) % 64, hms % 64
        return f"{sign}{hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"
    ymd, time_ = hms >> 17, hms % (1 << 17)
    year, month, day = (ymd >> 5) // 13, (ymd >> 5) % 13, ymd % 32
    date = f"{year:04d}-{month:02d}-{day:02d}"
    if field_type == MYSQL_TYPE_DATE:
        return date
    hour, minute, second = time_ >> 12, (time_ >> 6) % 64, time_ % 64
    return f"{date} {hour:02d}:{minute:02d}:{second:02d}.{fraction:06d}"


def _offset(data, at, large):
    width = 4 if large else 2
    _need(data[at:], width, "offset or size")
    return int.from_bytes(data[at:at + width], "little")


def _varlen(data):
    """A variable-length size (7 bits a byte, low first, at most 5 bytes): (size, bytes)."""
    length = 0
    for i in range(min(len(data), 5)):
        length |= (data[i] & 0x7F) << (7 * i)
        if not data[i] & 0x80:
            if length > 0xFFFFFFFF:
                break
            return length, i + 1
    raise JsonBinaryError("malformed variable-length size")


def _need(data, size, what):
    if len(data) < size:
        raise JsonBinaryError(f"{what} cut short: {len(data)} of {size} bytes")


def _utf8(data):
    try:
        return bytes(data).decode("utf-8")
    except UnicodeDecodeError as e:
        raise JsonBinaryError(f"string that is not UTF-8: {e}") from None
