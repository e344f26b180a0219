"""--parquet URL: the replay written as a change table in Parquet (storage I/O).

One row per row change (the columns of ``replay.changes``), in commit order,
in part files ``part-00000.parquet``, ``part-00001.parquet``, ... under URL
(any fsspec URL: ``file:///path``, ``s3://bucket/prefix``). A new part starts
every ``rows_per_part`` rows (or about ``bytes_per_part`` of JSON images), so
memory stays bounded. On ``file://`` a part is written under a hidden
``.part-*.tmp-*`` name, fsynced and renamed into place (``mysqlbackup.durable``);
object stores publish an object only when its upload completes.

A destination that already holds parts or a ``_SUCCESS`` is refused: a change
table is written once, whole (there is no resume; remove it and run again).
``_SUCCESS`` (JSON: rows, parts, transactions) is written last, and only by
``finish`` after a replay that ended without error; a failed run leaves the
parts written so far and no ``_SUCCESS``. Readers (Spark, pyarrow.dataset)
skip names starting with '_' and '.'. When nothing was selected, one empty part
still carries the schema.
"""

import json
import uuid

import fsspec
import pyarrow as pa
import pyarrow.parquet as pq

from mysqlbackup.archive.store import s3_client_options
from mysqlbackup.durable import open_durably
from mysqlbackup.errors import UsageError
from replay.job.decoding.changes import iter_changes
from replay.job.sinks.base import Sink

ROWS_PER_PART = 100_000
BYTES_PER_PART = 128 << 20
SUCCESS = "_SUCCESS"
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


class ParquetSink(Sink):
    """A replay sink that writes the change table."""

    def __init__(self, url, storage_options=None, rows_per_part=ROWS_PER_PART,
                 bytes_per_part=BYTES_PER_PART):
        self.url, self.options = url, dict(storage_options or {})
        self.rows_per_part, self.bytes_per_part = rows_per_part, bytes_per_part
        self.fs = self.root = None
        self.local = False
        self.buffer, self.buffered_bytes = [], 0
        self.parts, self.rows, self.transactions = [], 0, 0

    def open(self, source):
        """Reach the destination and refuse one that already holds a change table (once:
        the CLI opens it before Spark starts, the replay's own open is then a no-op)."""
        if self.fs is not None:
            return self
        options = self.options
        if protocol_of(self.url) in ("s3", "s3a"):
            options = s3_client_options(options)
        try:
            self.fs, root = fsspec.core.url_to_fs(self.url, **options)
        except (ImportError, ValueError, TypeError) as e:
            raise UsageError(f"cannot use --parquet {self.url}: {e}") from None
        self.root = root.rstrip("/")
        self.local = "file" in _protocols(self.fs)
        taken = self._existing()
        if taken:
            raise UsageError(f"--parquet {self.url} already holds a change table ({taken[0]}"
                             f"{' ...' if len(taken) > 1 else ''}): give an empty destination "
                             f"or remove it first")
        if self.local:
            self.fs.makedirs(self.root, exist_ok=True)
        return self

    def _existing(self):
        self.fs.invalidate_cache()
        if not self.fs.exists(self.root):
            return []
        names = sorted(p.rstrip("/").rsplit("/", 1)[-1] for p in self.fs.ls(self.root,
                                                                             detail=False))
        return [n for n in names if n == SUCCESS or (n.startswith("part-")
                                                     and n.endswith(".parquet"))]

    def apply(self, trx, fde_event, checksum, fde):
        """Decode the transaction's row changes into the buffer; write full parts."""
        for change in iter_changes(trx, fde, checksum):
            self.buffer.append(change)
            self.buffered_bytes += len(change["before"] or "") + len(change["after"] or "")
            if (len(self.buffer) >= self.rows_per_part
                    or self.buffered_bytes >= self.bytes_per_part):
                self._flush()
        self.transactions += 1

    def close(self):
        """Write the rows still buffered (also after an error: the parts hold a prefix)."""
        if self.fs is not None and self.buffer:
            self._flush()

    def finish(self, summary=None):
        """After a replay that ended without error: the empty part if none, then _SUCCESS."""
        if self.fs is None:  # nothing was selected: the replay never opened the sink
            self.open(None)
        self.close()
        if not self.parts:
            self._flush()
        marker = {"rows": self.rows, "parts": self.parts, "transactions": self.transactions,
                  "stop_reason": (summary or {}).get("stop_reason")}
        self._write(SUCCESS, lambda f: f.write(json.dumps(marker, indent=1).encode("utf-8")))

    def _flush(self):
        table = pa.Table.from_pylist(self.buffer, schema=SCHEMA)
        name = f"part-{len(self.parts):05d}.parquet"
        self._write(name, lambda f: pq.write_table(table, f))
        self.parts.append(name)
        self.rows += len(self.buffer)
        self.buffer, self.buffered_bytes = [], 0

    def _write(self, name, write):
        target = f"{self.root}/{name}"
        if not self.local:
            with self.fs.open(target, "wb") as f:
                write(f)
            return
        with open_durably(target, tmp=f"{self.root}/.{name}.tmp-{uuid.uuid4().hex}") as f:
            write(f)


def _protocols(fs):
    proto = fs.protocol
    return set(proto) if isinstance(proto, (tuple, list)) else {proto}
