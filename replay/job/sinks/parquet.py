"""--parquet URL: the replay written as a change table in Parquet (storage I/O).

One row per row change (the columns of ``replay.changes``), in commit order, in part
files under URL (any fsspec URL: ``file:///path``, ``s3://bucket/prefix``). The parts are
written where the files are decoded, by the Spark tasks (``PartWriter``, called from
``replay.job.tasks.decode_unit``): file N of the replay (in commit order) writes
``part-NNNNNN-0000.parquet``, ``part-NNNNNN-0001.parquet``, ... a new part every
``rows_per_part`` rows (or about ``bytes_per_part`` of JSON images), so memory stays
bounded; no row change passes through the driver. On a cluster, URL must be storage
every executor reaches (S3): a ``file://`` path is each host's own disk.

The driver (``ParquetSink``) checks that each file's task wrote the transactions the
driver's own choice applies (``adopt``), removes the parts of files it did not adopt
(past a stop point, or after an error: ``close``) and writes ``_SUCCESS`` (JSON: rows,
parts, transactions) last, only after a replay that ended without error (``finish``);
a failed run leaves the adopted parts (a prefix in commit order) and no ``_SUCCESS``.
``_SUCCESS`` also says what the table cannot hold (``not_in_table``): statement-based
DML, counted and named, and cascaded foreign-key changes, which the binlog lacks.
On ``file://`` a part is written under a hidden ``.part-*.tmp-*`` name, fsynced and
renamed into place (``mysqlbackup.durable``); object stores publish an object only when
its upload completes. Readers (Spark, pyarrow.dataset) skip names starting with '_'
and '.'. When nothing was selected, one empty part still carries the schema.

With ``typed_tables`` (``--typed``) each task also writes its file's row changes into
one typed dataset per source table under ``_tables/`` (``typed``; ``_TypedParts``); the
driver adopts and removes those parts as it does the others and writes
``_tables/_manifest.json`` before ``_SUCCESS``.

A destination that already holds parts, ``_tables`` or a ``_SUCCESS`` is refused: a
change table is written once, whole (there is no resume; remove it and run again).
"""

import json
import logging
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from mysqlbackup.archive.options import s3_client_options
from mysqlbackup.durable import open_durably
from mysqlbackup.errors import MysqlBackupError, UsageError, mask_url
from replay.job.decoding.changes import iter_changes
from replay.job.sinks import typed
from replay.job.sinks.base import Sink
from replay.job.sinks.writers import ParquetTaskWriter

log = logging.getLogger(__name__)

ROWS_PER_PART = 100_000
BYTES_PER_PART = 32 << 20  # of JSON images buffered: about 4x that in memory at the write
SUCCESS = "_SUCCESS"
LEFT_OUT_LISTED = 100  # statement-based DML statements named one by one in _SUCCESS
# what _SUCCESS says the table cannot hold (changes.iter_changes)
NOT_IN_TABLE = ("statement-based DML (binlog_format STATEMENT or MIXED) logs statements, "
                "not rows: each is counted and the first ones named here; rows a foreign "
                "key's ON DELETE/ON UPDATE CASCADE changed are not in the binlog of MariaDB "
                "and MySQL 8.x (MySQL 9.x logs them)")
SCHEMA = pa.schema([
    pa.field("op", pa.string(), nullable=False),
    pa.field("db", pa.string(), nullable=False),
    pa.field("table", pa.string(), nullable=False),
    pa.field("pk", pa.string()),
    pa.field("before", pa.string()),
    pa.field("after", pa.string()),
    pa.field("gtid", pa.string()),
    pa.field("commit_time", pa.timestamp("us", tz="UTC"), nullable=False),
    pa.field("file", pa.string(), nullable=False),
    pa.field("position", pa.int64()),
    pa.field("row_index", pa.int32(), nullable=False),
])


def protocol_of(url):
    """The fsspec protocol of a URL ('file' for a plain path)."""
    return url.split("://", 1)[0] if "://" in url else "file"


def options_for(url, archive_url, archive_options):
    """Storage options for the destination: the archive's when it uses the same protocol."""
    same = protocol_of(url) == protocol_of(archive_url or "")
    return dict(archive_options or {}) if same else {}


def part_name(seq, number):
    """The name of part ``number`` of the replay's file ``seq`` (both sort in commit order)."""
    return f"part-{seq:06d}-{number:04d}.parquet"


class _Destination:
    """The change table's folder: its filesystem, root and how a part is written."""

    def __init__(self, url, options):
        if protocol_of(url) in ("s3", "s3a"):
            options = s3_client_options(options)
        try:
            self.fs, root = fsspec.core.url_to_fs(url, **options)
        except (ImportError, ValueError, TypeError) as e:
            raise UsageError(f"cannot use --parquet {url}: {e}") from None
        self.root = root.rstrip("/")
        self.local = "file" in _protocols(self.fs)

    def names(self):
        """The change table's names now in the folder (parts and _SUCCESS), sorted."""
        self.fs.invalidate_cache()
        if not self.fs.exists(self.root):
            return []
        names = sorted(p.rstrip("/").rsplit("/", 1)[-1]
                       for p in self.fs.ls(self.root, detail=False))
        return [n for n in names if n in (SUCCESS, typed.TABLES_DIR)
                or (n.startswith("part-") and n.endswith(".parquet"))]

    def write(self, name, write):
        """Publish ``name`` (a path under the root), its bytes given by ``write(file)``,
        whole or not at all."""
        target = f"{self.root}/{name}"
        if not self.local:
            with self.fs.open(target, "wb") as f:
                write(f)
            return
        folder, base = target.rsplit("/", 1)
        self.fs.makedirs(folder, exist_ok=True)
        with open_durably(target, tmp=f"{folder}/.{base}.tmp-{uuid.uuid4().hex}") as f:
            write(f)

    def write_table(self, name, rows, schema=SCHEMA):
        """``rows`` (change dicts) as the Parquet part ``name``."""
        table = pa.Table.from_pylist(rows, schema=schema)
        self.write(name, lambda f: pq.write_table(table, f))

    def typed_parts(self):
        """The typed tables' parts now under the root (paths under it), sorted."""
        folder = f"{self.root}/{typed.TABLES_DIR}"
        if not self.fs.exists(folder):
            return []
        cut = len(self.root) + 1
        return sorted(p[cut:] for p in self.fs.find(folder) if typed.is_typed_part(p))

    def remove(self, name):
        """Remove ``name`` (a part the replay does not keep)."""
        self.fs.rm_file(f"{self.root}/{name}")


class PartWriter:
    """Task side: the row changes of one file's transactions as its parts.

    ``spec`` (a ``writers.ParquetTaskWriter``: ``ParquetSink.task_spec`` at ``seq``, the
    file's place in the replay). ``close`` writes what is still
    buffered and returns what was written: {"parts": [(name, rows)], "rows",
    "transactions", "left_out"} (``left_out``: the statement-based DML statements, which
    are no row changes: ``changes.iter_changes``)."""

    declined = ()  # it writes every file it is given (``SqlChunk`` may decline one)

    def __init__(self, spec, fde_event=None):
        self.dest = _Destination(spec.url, spec.options)
        self.seq = spec.seq
        self.rows_per_part = spec.rows_per_part or ROWS_PER_PART
        self.bytes_per_part = spec.bytes_per_part or BYTES_PER_PART
        self.buffer, self.buffered_bytes = [], 0
        self.parts, self.rows, self.transactions, self.left_out = [], 0, 0, []
        self.tables = {}  # the file's TABLE_MAPs, decoded once (one PartWriter a file)
        self.typed = (_TypedParts(self.dest, self.seq, self.rows_per_part,
                                  self.bytes_per_part) if spec.typed else None)

    def apply(self, trx, fde, checksum):
        """Decode the transaction's row changes into the buffer; write full parts."""
        typed_parts = self.typed
        for change in iter_changes(trx, fde, checksum, self.left_out, self.tables,
                                   stored=typed_parts is not None):
            size = len(change["before"] or "") + len(change["after"] or "")
            if typed_parts is not None:
                typed_parts.add(change, change.pop("stored"), size)
            self.buffer.append(change)
            self.buffered_bytes += size
            if (len(self.buffer) >= self.rows_per_part
                    or self.buffered_bytes >= self.bytes_per_part):
                self._flush()
        self.transactions += 1

    def close(self):
        """Write the rows still buffered; what was written."""
        if self.buffer:
            self._flush()
        written = {"parts": self.parts, "rows": self.rows, "transactions": self.transactions,
                   "left_out": self.left_out}
        if self.typed is not None:
            written["typed"] = self.typed.close()
        return written

    def _flush(self):
        name = part_name(self.seq, len(self.parts))
        self.dest.write_table(name, self.buffer)
        self.parts.append((name, len(self.buffer)))
        self.rows += len(self.buffer)
        self.buffer, self.buffered_bytes = [], 0


class _TypedParts:
    """Task side of the typed tables (``typed``): each row change buffered by its
    table's schema version and day, all written when the buffers hold ``rows_per_part``
    rows or about ``bytes_per_part`` bytes together (so memory stays bounded whatever
    the number of tables)."""

    def __init__(self, dest, seq, rows_per_part, bytes_per_part):
        self.dest, self.seq = dest, seq
        self.rows_per_part, self.bytes_per_part = rows_per_part, bytes_per_part
        self.buffers = {}   # folder -> (TableSchema, [row, ...])
        self.counts = {}    # folder -> parts written there
        self.rows = self.bytes = 0
        self.parts = []
        self.history = typed.History()

    def add(self, change, stored, size):
        """One row change (its ``changes.Stored`` images)."""
        rows = stored.rows
        schema = typed.schema_of(rows.columns, rows.schema, rows.table, stored.dbms)
        folder = typed.directory(schema, change["commit_time"])
        buffered = self.buffers.get(folder)
        if buffered is None:
            buffered = self.buffers[folder] = (schema, [])
        buffered[1].append({"op": change["op"], "gtid": change["gtid"],
                            "commit_time": change["commit_time"], "file": change["file"],
                            "position": change["position"], "row_index": change["row_index"],
                            "before": schema.row(stored.before),
                            "after": schema.row(stored.after)})
        self.history.add(schema, change)
        self.rows += 1
        self.bytes += size
        if self.rows >= self.rows_per_part or self.bytes >= self.bytes_per_part:
            self._flush()

    def close(self):
        """Write what is buffered; (parts written, the file's history)."""
        self._flush()
        return {"parts": self.parts, "history": self.history.as_dict()}

    def _flush(self):
        for folder, (schema, rows) in self.buffers.items():
            number = self.counts.get(folder, 0)
            name = f"{typed.TABLES_DIR}/{folder}/{part_name(self.seq, number)}"
            try:
                self.dest.write_table(name, rows, schema.arrow_schema())
            except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, TypeError) as e:
                first = rows[0]
                raise MysqlBackupError(
                    f"{first['file']}:{first['position']}: the typed table of "
                    f"{schema.db}.{schema.table} cannot hold a value of these row changes: "
                    f"{type(e).__name__}: {e}") from None
            self.counts[folder] = number + 1
            self.parts.append(name)
        self.buffers, self.rows, self.bytes = {}, 0, 0


class ParquetSink(Sink):
    """Driver side of the change table: the destination refused when taken, each file's
    parts adopted in commit order, the rest removed, ``_SUCCESS`` last."""

    def __init__(self, url, storage_options=None, rows_per_part=ROWS_PER_PART,
                 bytes_per_part=BYTES_PER_PART, typed_tables=False):
        self.url, self.options = url, dict(storage_options or {})
        self.rows_per_part, self.bytes_per_part = rows_per_part, bytes_per_part
        self.typed_tables = typed_tables
        self.dest = None
        self.parts, self.rows, self.transactions = [], 0, 0
        self.typed_parts, self.history = [], typed.History()
        self.left_out = []  # statement-based DML the table cannot hold (named in _SUCCESS)

    def open(self, source):
        """Reach the destination and refuse one that already holds a change table (once:
        the CLI opens it before Spark starts, the replay's own open is then a no-op)."""
        if self.dest is not None:
            return self
        self.dest = _Destination(self.url, self.options)
        taken = self.dest.names()
        if taken:
            raise UsageError(f"--parquet {self.url} already holds a change table ({taken[0]}"
                             f"{' ...' if len(taken) > 1 else ''}): give an empty destination "
                             f"or remove it first")
        if self.dest.local:
            self.dest.fs.makedirs(self.dest.root, exist_ok=True)
        return self

    def task_spec(self):
        """What a task needs to write a file's parts (``PartWriter``; ``seq`` set per
        file). The storage options are the destination's own (credentials included)."""
        return ParquetTaskWriter(url=self.url, options=self.options,
                                 rows_per_part=self.rows_per_part,
                                 bytes_per_part=self.bytes_per_part, typed=self.typed_tables)

    def adopt(self, written, transactions):
        """Keep what a file's task wrote (``PartWriter.close``), which must be the row
        changes of ``transactions``, the ones the driver chose to apply of that file."""
        if written["transactions"] != len(transactions):
            raise RuntimeError(f"a task wrote {written['transactions']} transactions of "
                               f"{transactions[0].file if transactions else 'a file'}, the "
                               f"replay applies {len(transactions)}")
        self.parts += [name for name, _rows in written["parts"]]
        self.rows += written["rows"]
        self.transactions += written["transactions"]
        self.left_out += written.get("left_out", [])
        if self.typed_tables:
            self.typed_parts += written["typed"]["parts"]
            self.history.join(written["typed"]["history"])

    def apply_many(self, transactions, fde_event, checksum, fde):
        """Refused: the tasks write the parts (``adopt``)."""
        raise RuntimeError("the change table's parts are written by the tasks: "
                           "ParquetSink.adopt takes what they wrote")

    def close(self):
        """Remove the parts no file's adoption kept: a file past the stop point, or
        decoded in the window after an error (called also after an error: a failure
        to remove them is then a warning, the replay's own error stands)."""
        if self.dest is None:
            return
        try:
            self._remove_unadopted()
        except Exception as e:  # noqa: BLE001 - finish() removes them again, and raises
            log.warning("--parquet %s: could not remove the parts of files the replay did "
                        "not adopt: %s", mask_url(self.url), e)

    def _remove_unadopted(self):
        """Remove the parts not adopted; MysqlBackupError when an adopted one is not
        there (a file:// destination that is each worker's own disk)."""
        kept, present = set(self.parts), set(self.dest.names()) - {typed.TABLES_DIR}
        for name in sorted(present - kept - {SUCCESS}):
            self.dest.remove(name)
        missing = sorted(kept - present)
        typed_kept, typed_present = set(self.typed_parts), set(self.dest.typed_parts())
        for name in sorted(typed_present - typed_kept):
            self.dest.remove(name)
        missing += sorted(typed_kept - typed_present)
        if missing:
            raise MysqlBackupError(
                f"--parquet {mask_url(self.url)} lacks {missing[0]}, which a task wrote: on a "
                "cluster the destination must be storage every executor and the driver "
                "reach (s3://...); a file:// path is each host's own disk")

    def finish(self, summary=None):
        """After a replay that ended without error: the empty part if none, then _SUCCESS."""
        if self.dest is None:  # nothing was selected: the replay never opened the sink
            self.open(None)
        self._remove_unadopted()
        if not self.parts:
            self.dest.write_table(part_name(0, 0), [])
            self.parts.append(part_name(0, 0))
        if self.typed_tables:
            content = typed.manifest(self.history, self.typed_parts)
            self.dest.write(f"{typed.TABLES_DIR}/{typed.MANIFEST}", lambda f: f.write(
                json.dumps(content, indent=1).encode("utf-8")))
        marker = {"rows": self.rows, "parts": self.parts, "transactions": self.transactions,
                  "stop_reason": summary.stop_reason if summary else None,
                  "not_in_table": {
                      "statements": len(self.left_out),
                      "first_statements": self.left_out[:LEFT_OUT_LISTED],
                      "why": NOT_IN_TABLE}}
        self.dest.write(SUCCESS, lambda f: f.write(json.dumps(marker, indent=1).encode("utf-8")))

    @property
    def fs(self):
        """The destination's fsspec filesystem (after ``open``)."""
        return self.dest.fs

    @property
    def root(self):
        """The destination's path in ``fs`` (after ``open``)."""
        return self.dest.root


def _protocols(fs):
    proto = fs.protocol
    return set(proto) if isinstance(proto, (tuple, list)) else {proto}
