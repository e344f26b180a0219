"""A row change's JSON (pure): its values, images and key as the change table holds
them (``changes`` finds the rows; ``--parquet`` writes these texts).

Values in the JSON images, encoded deterministically:

- integers, floats, text (decoded with the column's charset): JSON numbers and
  strings; a FLOAT column comes out as the double its 4 bytes hold;
- DECIMAL: a string in plain notation with the column's scale ("12.30");
- binary values (BINARY, VARBINARY, BLOB, GEOMETRY, and text in a charset Python
  does not know): standard base64 with padding;
- DATETIME: ISO 8601 without zone ("2024-01-02T03:04:05.678000", the fraction
  only when it is not zero); TIMESTAMP: the same in UTC with a "Z"; DATE:
  "2024-02-29"; TIME: "[-]HH:MM:SS[.ffffff]" (hours may exceed 24); YEAR: integer;
- ENUM: its string; SET: a JSON list of the members in the column's order
  ([] when empty); BIT: a string of '0'/'1', most significant bit first; BINARY(n):
  its n bytes (the binlog drops the trailing zero bytes, the server pads them back);
  YEAR 0000: 0;
  MariaDB JSON (a LONGTEXT): its text; MySQL JSON (type 245, binary in the
  rows event): its text as MySQL prints it (``SELECT col``): keys in stored
  order, integers and doubles as MySQL writes them, DECIMAL with its scale,
  dates and times quoted (``replay.job.decoding.mysqljson``); a top-level string
  keeps its quotes ('"hello"'), the JSON null literal is 'null' (SQL NULL: null);
- NULL: null. A zero or invalid DATE/DATETIME ('0000-00-00') also becomes
  null: the library does not return it; so does the zero TIMESTAMP. A column missing
  from a row image (binlog_row_image=MINIMAL or NOBLOB) is absent from the JSON object.

A row image is a JSON object of its columns in the table's order (``image_values`` then
``to_json``; the compiled twins ``json_image`` and ``image_json`` write the same); the key
an object of the key's columns in the key's order (``key_json``). For a table whose every
column is a plain one (integers, strings, DECIMAL, DATETIME, DATE, FLOAT, DOUBLE: no value
the server stores otherwise, ``as_stored``), ``json_changes`` writes the texts straight
from a rows event's bytes (the compiled ``rows_json``: no value object), the same text.
"""

import base64
import datetime
import decimal
import json

from pymysqlreplication.constants import FIELD_TYPE, NONE_SOURCE

from mysqlbackup.errors import MysqlBackupError
from mysqlbackup.speedups import load_twin
from replay.job.decoding import rowdecode, rowloop

_TIMESTAMPS = {FIELD_TYPE.TIMESTAMP, FIELD_TYPE.TIMESTAMP2}
# the version of the twins: ``_changejson.TWIN`` must be the same (bump both on a change)
TWIN = 1


class ChangeDecodeError(MysqlBackupError):
    """A transaction the change table cannot take; names the file and position."""


OP_CODES = {"insert": 0, "update": 1, "delete": 2}  # rows_json's
JSON_KINDS = frozenset({rowloop.K_INT, rowloop.K_STRING, rowloop.K_DECIMAL,
                         rowloop.K_DATETIME2, rowloop.K_DATE, rowloop.K_DOUBLE,
                         rowloop.K_FLOAT})


def json_changes(event, op, table, pk, reader, trx, at, position):
    """The change rows of one rows event (``op`` its kind) of ``table`` (the decoded
    TABLE_MAP; ``pk`` its key's column names), its images' and key's JSON written straight
    from its bytes (the compiled ``rows_json``: the same text as ``changes``' row dicts
    give), or None: the event goes the usual way (no compiled loop, a column or value
    not written there, anything that fails: the usual way gives the same, or names the
    fault). ``at``: the position its rows are numbered at, and how many so far."""
    rows_json = rowdecode.twin(compiled, "rows_json", None)
    if rows_json is None:
        return None
    spec = table.__dict__.get("_json_spec")  # kept with the decoded TABLE_MAP
    if spec is None:
        spec = table.__dict__["_json_spec"] = _spec(table, pk, reader.dbms)
    if not spec or reader.checksum and not rowdecode.crc_ok(event):
        return None
    plan, names, key = spec
    try:
        data, pos, end, before, after = rowdecode.row_images(
            event, plan, reader.checksum,
            rowdecode.post_header(reader.post_header_lens, event[4]))
        found = rows_json(data, pos, end, before, after, OP_CODES[op], names, key)
    except Exception:  # noqa: BLE001 - the usual way reads it again, and names the fault
        return None
    if found is None or found[1] != end:
        return None
    first, commit_time = number_rows(at, position, len(found[0])), utc(trx.commit_ts)
    return [{"op": op, "db": table.schema, "table": table.table, "pk": k, "before": old,
             "after": new, "gtid": trx.gtid, "commit_time": commit_time, "file": trx.file,
             "position": position, "row_index": index}
            for index, (old, new, k) in enumerate(found[0], first)]


def number_rows(at, position, count):
    """The index of the first of ``count`` rows of the rows event at ``position``, counted
    in ``at`` ([position, rows numbered there so far]: the rows events of one
    TRANSACTION_PAYLOAD share its position, and their rows are numbered on across them)."""
    if at[0] != position:
        at[:] = [position, 0]
    first = at[1]
    at[1] += count
    return first


def _spec(table, pk, dbms):
    """(plan, each column's JSON name and colon, the key's column indexes) of a table
    whose every column ``rows_json`` writes (no stored column: ``as_stored``), else
    False."""
    try:
        plan = rowdecode.kept_plan(table, dbms)
    except rowdecode.Unsupported:
        return False
    names = [c.name for c in plan.columns]
    stored = stored_columns({c.name: c for c in table.columns})
    if any(c.kind not in JSON_KINDS or c.name in stored or c.kind == rowloop.K_STRING and
           c.p2 is None for c in plan.columns) or not set(pk) <= set(names):
        return False
    return (plan, tuple(ENCODER.encode(n) + ":" for n in names),
            tuple(names.index(c) for c in pk))


def stored_image(values, none_sources, columns):
    """One row image's {column: value} as the server holds it (``as_stored``): a column
    absent from the image left out, an empty SET as an empty set, NULL as None."""
    stored = stored_columns(columns)
    image = {}
    for name, value in values.items():
        if value is None:
            source = none_sources.get(name)
            if source == NONE_SOURCE.COLS_BITMAP:
                continue
            image[name] = set() if source == NONE_SOURCE.EMPTY_SET else None
        else:
            image[name] = as_stored(value, columns.get(name)) if name in stored else value
    return image


def images(op, row, columns, image_of):
    """(before, after) of a row, each made by ``image_of`` (``image_values`` or its compiled
    twin ``_changejson.json_image``: JSON-ready; ``stored_image``: the server's values)
    from the row's values and none sources."""
    if op == "update":
        return (image_of(row["before_values"], row["before_none_sources"], columns),
                image_of(row["after_values"], row["after_none_sources"], columns))
    image = image_of(row["values"], row["none_sources"], columns)
    return (None, image) if op == "insert" else (image, None)


_PLAIN = (int, float, str)  # values whose JSON is themselves (bool is an int too)


def image_values(values, none_sources, columns):
    image = {}
    stored = stored_columns(columns)
    for name, value in values.items():
        if value is None:
            source = none_sources.get(name)
            if source == NONE_SOURCE.COLS_BITMAP:
                continue  # not in this row image
            if source == NONE_SOURCE.EMPTY_SET:
                image[name] = []
                continue
            image[name] = None
        elif name not in stored and type(value) in _PLAIN:
            image[name] = value
        else:
            column = columns.get(name)
            image[name] = encode_value(as_stored(value, column), column)
    return image


def stored_columns(columns):
    """The names of the columns whose values ``as_stored`` may change (kept on the
    columns dict's first column: one set per table)."""
    first = next(iter(columns.values()), None)
    if first is None:
        return ()
    found = first.__dict__.get("_stored_names")
    if found is None:
        found = first.__dict__["_stored_names"] = frozenset(
            name for name, c in columns.items()
            if c.type in _TIMESTAMPS or c.type == FIELD_TYPE.YEAR
            or c.type == FIELD_TYPE.STRING and c.character_set_name == "binary")
    return found


_ZERO_TIMESTAMP = datetime.datetime(1970, 1, 1)


def as_stored(value, column):
    """The value the server holds, where the library gives another: a BINARY(n) value
    padded back to n bytes, YEAR 0000 (the library's 1900), the zero TIMESTAMP (the
    library's 1970-01-01 00:00:00, out of a TIMESTAMP's range) as None."""
    if column is None or value is None:
        return value
    if column.type == FIELD_TYPE.STRING and column.character_set_name == "binary":
        # (the library "decodes" an empty value to '': Python decodes b'' in any codec)
        raw = value.encode("latin-1") if isinstance(value, str) else bytes(value)
        return raw.ljust(column.max_length, b"\x00")
    if column.type == FIELD_TYPE.YEAR and value == 1900:
        return 0
    if column.type in _TIMESTAMPS and value == _ZERO_TIMESTAMP:
        return None
    return value


def key_json(pk, before, after):
    if not pk:
        return None
    image = after if after is not None and all(c in after for c in pk) else before
    return to_json({c: image.get(c) for c in pk})


def encode_value(value, column=None):
    """A decoded column value as a JSON-native value (the rules of the module docstring)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, decimal.Decimal):
        return format(value, "f")
    if isinstance(value, (bytes, bytearray)):
        return base64.b64encode(value).decode("ascii")
    if isinstance(value, datetime.datetime):
        zone = "Z" if column is not None and column.type in _TIMESTAMPS else ""
        return value.isoformat() + zone
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, datetime.timedelta):
        return time_text(value)
    if isinstance(value, (set, frozenset)):
        order = (column.set_values if column is not None else None) or sorted(value)
        return [member for member in order if member in value]
    if isinstance(value, dict):  # nested values (MySQL JSON comes as its text instead)
        return {_text(k): encode_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [encode_value(v) for v in value]
    raise ChangeDecodeError(f"cannot encode a {type(value).__name__} value")


def time_text(delta):
    """A TIME value as MySQL prints it: [-]HH:MM:SS[.ffffff]."""
    micros = delta.days * 86_400_000_000 + delta.seconds * 1_000_000 + delta.microseconds
    sign, micros = ("-" if micros < 0 else ""), abs(micros)
    seconds, fraction = divmod(micros, 1_000_000)
    text = f"{sign}{seconds // 3600:02d}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
    return text + (f".{fraction:06d}" if fraction else "")


def _text(key):
    return key.decode("utf-8") if isinstance(key, (bytes, bytearray)) else str(key)


ENCODER = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)


def _one_encoder():
    """``ENCODER``'s C encoder made once (``encode`` makes one a call, a third of its
    cost for a row image), or None where the json module has none or it writes other
    text than ``encode`` (a probe says)."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    try:
        encode = make(None, ENCODER.default, json.encoder.encode_basestring, None, ":", ",",
                      False, False, False)
        probe = {"a\"é\n": [1, -2.5, None, True, "x"], "b": {"c": 18446744073709551615}}
        if "".join(encode(probe, 0)) != ENCODER.encode(probe):
            return None
    except Exception:  # noqa: BLE001 - another Python's json: the plain way
        return None
    return encode


_ENCODE = _one_encoder()


def to_json(obj):
    """A row image's or key's JSON text (None for None): the json module's, or the same
    text by the compiled twin (``_changejson.image_json``) when the image is flat."""
    if obj is None:
        return None
    text = rowdecode.twin(compiled, "image_json", None)
    if text is not None:
        return text(obj)
    if _ENCODE is not None:
        return "".join(_ENCODE(obj, 0))
    return ENCODER.encode(obj)


def utc(epoch):
    return datetime.datetime.fromtimestamp(epoch, datetime.timezone.utc)


# the compiled twin (``_changejson``), through the project's one loader: its
# ``json_image`` and ``image_json`` write with these what they do not write themselves
FUNCTIONS = ("configure_json", "json_image", "configure_image_json", "image_json",
             "rows_json")


def _configure(module):
    module.configure_json(stored_columns, encode_value, as_stored, NONE_SOURCE.COLS_BITMAP,
                          NONE_SOURCE.EMPTY_SET)
    module.configure_image_json(_ENCODE or (lambda obj, _: (ENCODER.encode(obj),)))


def _load():
    """The compiled twin, configured, or (None, why not)."""
    return load_twin("replay.job.decoding._changejson", TWIN, FUNCTIONS, _configure)


compiled, _why = _load()
