"""Typed change tables: one Parquet dataset per source table, typed columns (pure).

``replay --parquet URL --typed`` writes, beside the change table of JSON images, one
dataset per source table under ``URL/_tables/`` (a name readers of the change table skip),
each row change with its images as structs of typed columns::

    URL/_tables/<db>.<table>/<version>/commit_date=YYYY-MM-DD/part-SSSSSS-NNNN.parquet
    URL/_tables/_manifest.json

Columns: ``op``, ``gtid``, ``commit_time`` (timestamp[us, UTC]), ``file``, ``position``,
``row_index``, ``before`` and ``after`` (a struct of the table's columns; null for an
insert's before and a delete's after); ``commit_date`` is the Hive partition of the
directory, so Spark (``spark.read.parquet(dir)``) and DuckDB (``read_parquet('dir/**',
hive_partitioning=true)``) prune by table (the path) and by day.

A column's type (``arrow_type``), from the TABLE_MAP (``binlog_row_metadata=FULL``):

- TINYINT..BIGINT: int8/16/32/32/64, unsigned ones uint8..uint64; YEAR: int16 (0000: 0);
- FLOAT: float32, DOUBLE: float64; DECIMAL(p,s): decimal128(p,s) (decimal256 past 38);
- DATE: date32; DATETIME(n): timestamp[us]; TIMESTAMP(n): timestamp[us, UTC];
  TIME(n): duration[us] (TIME spans -838:59:59..838:59:59, more than a day);
- CHAR/VARCHAR/TEXT in a character set: string; BINARY/VARBINARY/BLOB, GEOMETRY and
  text in a character set Python lacks: binary (BINARY(n) padded to its n bytes);
- ENUM: its string; SET: its members in the column's order joined by ',' ('' for none);
- BIT(n): uint64; JSON: its text (MySQL's as MySQL prints it, MariaDB's as stored);
- any other type (the pre-5.6 temporal types, VECTOR...): string, the value as the JSON
  change table writes it (``changejson.encode_value``).

Null is SQL NULL, a zero or invalid date, and a column absent from the row image
(binlog_row_image=MINIMAL or NOBLOB: the JSON table tells absent from NULL).

A schema version is one list of (column name, type): its directory is ``v-`` and the
first 12 hex digits of the list's SHA-256 (``TableSchema.version``), so the tasks, one
a file, name it alike without asking each other. An ALTER that changes a column's name
or type starts another version; one that changes neither (VARCHAR(10) to (20)) keeps it.
A dataset never mixes two schemas. ``_manifest.json`` (``manifest``) lists per table its
versions (columns, Arrow and source types, rows) and its history: the spans of the
replay, in commit order, each with its version and its first and last row change.
"""

import hashlib
import json
import urllib.parse

import pyarrow as pa

from replay.job.decoding.changejson import encode_value
from replay.job.decoding.rowdecode import Unsupported, _column_plan
from replay.job.decoding.rowloop import (K_BIT, K_BYTES, K_DATE, K_DATETIME2, K_DECIMAL,
                                         K_DOUBLE, K_ENUM, K_FLOAT, K_INT, K_JSON, K_SET,
                                         K_STRING, K_TIME2, K_TIMESTAMP2, K_YEAR)

TABLES_DIR = "_tables"
MANIFEST = "_manifest.json"
MANIFEST_FORMAT = 1
_INTS = {1: (pa.int8(), pa.uint8()), 2: (pa.int16(), pa.uint16()),
         3: (pa.int32(), pa.uint32()), 4: (pa.int32(), pa.uint32()),
         8: (pa.int64(), pa.uint64())}
_FIXED = {K_FLOAT: pa.float32(), K_DOUBLE: pa.float64(), K_DATE: pa.date32(),
          K_DATETIME2: pa.timestamp("us"), K_TIMESTAMP2: pa.timestamp("us", tz="UTC"),
          K_TIME2: pa.duration("us"), K_YEAR: pa.int16(), K_ENUM: pa.string(),
          K_SET: pa.string(), K_BIT: pa.uint64(), K_BYTES: pa.binary(),
          K_JSON: pa.string()}
_JSON_TEXT = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"), allow_nan=False)
_OTHER = -1  # a column kind rowdecode does not read: its JSON value as text


def arrow_type(column, dbms):
    """The Arrow type of one of the library's TABLE_MAP columns (module docstring)."""
    return _typing(column, dbms)[0]


def _typing(column, dbms):
    """(Arrow type, the function that makes a stored value (``changejson.stored_image``)
    that type's Python value, or None when it already is) of one column."""
    try:
        kind, p1, p2 = _column_plan(column, dbms)
    except Unsupported:
        return pa.string(), _convert(_OTHER, column)
    if kind == K_INT:
        signed, unsigned = _INTS[p1]
        return (signed if p2 else unsigned), None
    if kind == K_STRING:  # p2: the codec (None: the bytes are kept)
        return (pa.string(), _to_text) if p2 is not None else (pa.binary(), _to_bytes)
    if kind == K_DECIMAL:
        return (pa.decimal128(p1, p2) if p1 <= 38 else pa.decimal256(p1, p2)), None
    return _FIXED[kind], _convert(kind, column)


def _convert(kind, column):
    if kind == K_SET:
        order = list(column.set_values or ())
        return lambda v: ",".join(m for m in order if m in v) if order else ",".join(sorted(v))
    if kind == K_BIT:
        return lambda v: int(v, 2) if v else 0
    if kind == _OTHER:
        return lambda v: v if isinstance(v, str) else _JSON_TEXT.encode(encode_value(v, column))
    return None


def _to_bytes(value):
    return value.encode("utf-8") if isinstance(value, str) else value


def _to_text(value):
    if isinstance(value, str):
        return value
    raise TypeError("a text column's value came as bytes")


class TableSchema:
    """The typed schema of one TABLE_MAP: ``fields`` (Arrow), ``version`` (its directory
    name), ``columns`` (for the manifest) and ``row(image)``, an image as the struct's
    values."""

    __slots__ = ("db", "table", "fields", "version", "columns", "key", "_converts", "_dirs")

    def __init__(self, db, table, columns, dbms):
        self.db, self.table = db, table
        # the table's name in the manifest and its directory: '<db>.<table>', each part
        # percent-encoded where it is not a plain identifier
        self.key = f"{_quote(db)}.{_quote(table)}"
        self._dirs = {}  # commit date -> ``directory``
        fields, described, converts = [], [], []
        for column in columns:
            atype, convert = _typing(column, dbms)
            fields.append(pa.field(column.name, atype))
            described.append({"name": column.name, "type": str(atype),
                              "source_type": column.type})
            if convert is not None:
                converts.append((column.name, convert))
        self.fields, self.columns, self._converts = fields, described, tuple(converts)
        signature = json.dumps([[c["name"], c["type"]] for c in described])
        self.version = "v-" + hashlib.sha256(signature.encode("utf-8")).hexdigest()[:12]

    def arrow_schema(self):
        """The Arrow schema of this version's parts."""
        image = pa.struct(self.fields)
        return pa.schema([
            pa.field("op", pa.string(), nullable=False),
            pa.field("gtid", pa.string()),
            pa.field("commit_time", pa.timestamp("us", tz="UTC"), nullable=False),
            pa.field("file", pa.string(), nullable=False),
            pa.field("position", pa.int64()),
            pa.field("row_index", pa.int32(), nullable=False),
            pa.field("before", image),
            pa.field("after", image),
        ])

    def row(self, image):
        """A stored image (``changejson.stored_image``, or None) as the struct's dict."""
        if image is None:
            return None
        if self._converts:
            image = dict(image)
            for name, convert in self._converts:
                value = image.get(name)
                if value is not None:
                    image[name] = convert(value)
        return image


def schema_of(columns, db, table, dbms):
    """The TableSchema of a TABLE_MAP's columns (the library's list), made once: kept on
    its first column, as ``changes`` keeps what it derives per table."""
    first = columns[0] if columns else None
    found = first.__dict__.get("_typed_schema") if first is not None else None
    if found is None:
        found = TableSchema(db, table, columns, dbms)
        if first is not None:
            first.__dict__["_typed_schema"] = found
    return found


def _quote(name):
    return urllib.parse.quote(name, safe="_$-")


def directory(schema, commit_time):
    """The folder (under ``_tables``) of a row change of ``schema`` committed then."""
    day = commit_time.date()
    found = schema._dirs.get(day)
    if found is None:
        found = schema._dirs[day] = f"{schema.key}/{schema.version}/commit_date={day.isoformat()}"
    return found


def locus(change):
    """Where a row change is, for the manifest's spans."""
    return {"file": change["file"], "position": change["position"],
            "row_index": change["row_index"], "gtid": change["gtid"],
            "commit_time": change["commit_time"].isoformat()}


def _locus(where):
    """A span's end as the manifest has it: ``locus`` of a row change, else as it is."""
    return locus(where) if "op" in where else where


class History:
    """The spans of versions per table, in commit order (a task's file, or the replay's
    whole, joined file by file: ``join``)."""

    def __init__(self, spans=None, versions=None):
        self.spans = spans if spans is not None else {}       # key -> [span, ...]
        self.versions = versions if versions is not None else {}  # key -> {version: info}

    def add(self, schema, change):
        """One row change of ``schema``'s table (kept as it is until ``as_dict`` makes
        the first and last of each span a ``locus``)."""
        key = schema.key
        spans = self.spans.setdefault(key, [])
        if spans and spans[-1]["version"] == schema.version:
            spans[-1]["last"] = change
            spans[-1]["rows"] += 1
        else:
            spans.append({"version": schema.version, "first": change, "last": change,
                          "rows": 1})
        versions = self.versions.setdefault(key, {})
        info = versions.get(schema.version)
        if info is None:
            info = versions[schema.version] = {"db": schema.db, "table": schema.table,
                                               "columns": schema.columns, "rows": 0}
        info["rows"] += 1

    def as_dict(self):
        """What a task returns (plain values: it crosses to the driver)."""
        spans = {key: [dict(span, first=_locus(span["first"]), last=_locus(span["last"]))
                       for span in found] for key, found in self.spans.items()}
        return {"spans": spans, "versions": self.versions}

    def join(self, written):
        """Append a later file's history (``as_dict``), a span that goes on merged."""
        for key, spans in written["spans"].items():
            mine = self.spans.setdefault(key, [])
            for span in spans:
                if mine and mine[-1]["version"] == span["version"]:
                    mine[-1]["last"] = span["last"]
                    mine[-1]["rows"] += span["rows"]
                else:
                    mine.append(dict(span))
        for key, versions in written["versions"].items():
            mine = self.versions.setdefault(key, {})
            for version, info in versions.items():
                if version in mine:
                    mine[version]["rows"] += info["rows"]
                else:
                    mine[version] = dict(info)


def manifest(history, parts):
    """``_manifest.json``'s content: per table its versions (directory, columns, rows) and
    its history, and the parts written (paths under ``_tables``)."""
    tables = {}
    for key in sorted(history.spans):
        versions = history.versions[key]
        any_version = next(iter(versions.values()))
        tables[key] = {
            "db": any_version["db"], "table": any_version["table"],
            "versions": {v: {"dir": f"{key}/{v}", "columns": info["columns"],
                             "rows": info["rows"]} for v, info in versions.items()},
            "history": history.spans[key]}
    return {"format": MANIFEST_FORMAT, "tables": tables, "parts": sorted(parts)}


def is_typed_part(path):
    """Whether a path under ``_tables`` is a part this module names."""
    name = path.rsplit("/", 1)[-1]
    return name.startswith("part-") and name.endswith(".parquet")
