"""--sql FILE: the replay written out as SQL for review, or for the engine's client to load
(a dry run; file I/O).

The file is what ``mariadb-binlog`` / ``mysqlbinlog`` would print for the same
transactions, loadable with ``mariadb < FILE`` / ``mysql < FILE``: every statement ends
with the delimiter ``/*!*/;`` (``DELIMITER /*!*/;`` at the top: a stored routine's
``BEGIN ... END`` body keeps its own semicolons), pseudo-replica mode is set first, and
a LOAD DATA reads its file's bytes from a file written beside it (``FILE.load/``;
the client needs ``--local-infile=1``). Each transaction is headed by
``-- GTID FILE:START-END`` (scripts parse that line: it keeps its shape) and
``-- at TIME: CHANGES`` (its commit time, UTC, and per table and kind the rows it
changes: ``summary.format_changes``); after each BINLOG statement come its rows as
``###`` comments, a row a line, and the annotated queries as ``#Q>`` (``rowtext``), as
``mysqlbinlog -v`` writes them.

The text is made where the files are decoded: each Spark task turns its file's chosen
transactions into text (``SqlChunk``, the same ``SqlText`` the driver uses) and the
driver writes it in commit order (``SqlFileSink.adopt``), so the rows become ``###``
lines on every core. A task that sees the driver's disk (local[*]) writes the text to
a file in ``FILE.parts/`` (removed at the end), a MiB at a time, and the driver copies
it into FILE; one on another host hands the text back, at most ``TASK_BYTES`` (a result
sits in the driver's memory). A task declines a file with a LOAD DATA (its data file is
named in the order of the whole replay) or, handing back, more text than that: that
file's events come to the driver, which writes it.

The statements go to ``FILE.partial`` until the replay ends well (``finish``), then to
FILE (fsynced, then renamed into place through ``mysqlbackup.durable``: after a crash
FILE is the whole replay or absent); a replay that fails leaves ``FILE.partial`` ending
with a line that says so.
"""

import os
import shutil
import uuid

from mysqlbackup import durable
from mysqlbackup.utc import iso
from mysqlbackup.binlog import events as ev
from mysqlbackup.errors import UsageError
from replay.job.decoding.rowtext import ROW_CAP, VALUE_CAP, RowText
from replay.job.decoding.summary import ChangeCollector, format_changes
from replay.job.sinks.base import Sink
from replay.job.sinks.writers import SqlTaskWriter
from replay.job.sinks.statements import (MYSQL_GTID_AUTOMATIC, binlog_bytes, binlog_statement,
                                         gtid_session, mysql_gtid, transaction_steps)

DELIMITER = "/*!*/;"
HEADER = ("-- mysqlbackup replay: apply with `mariadb --local-infile=1 < FILE` or MySQL's "
          "`mysql --local-infile=1 < FILE`, as a user with SUPER (MySQL: BINLOG_ADMIN, "
          "REPLICATION_APPLIER and SYSTEM_VARIABLES_ADMIN)\n"
          "-- each transaction: '-- GTID FILE:START-END', '-- at COMMIT_TIME: TABLE KIND ROWS, "
          "...'; after each BINLOG statement its rows as '### ' comments, a row a line "
          f"(values cut after {VALUE_CAP} characters, a row after {ROW_CAP}), and the "
          "annotated query as '#Q> '\n"
          f"DELIMITER {DELIMITER}\n")
PSEUDO_REPLICA = {True: "SET @@session.pseudo_slave_mode=1",
                  False: "SET @@session.pseudo_replica_mode=1"}
CHUNK = 1 << 20  # a task's text file written, and copied into FILE, a MiB at a time
TASK_BYTES = 256 << 20  # the most text a task hands back for one file (else the driver's)
_END = f"\n{DELIMITER}\n".encode()  # after each statement
INCOMPLETE = ("-- INCOMPLETE: the replay failed after the transaction above; this file "
              "stops there (do not load it as a whole replay)\n")


class Declined(Exception):
    """A task leaves a file's text to the driver (``SqlChunk``): a LOAD DATA (its data
    file is named in the order of the whole replay) or more text than it may hand back."""


class SqlText:
    """The text of transactions of one format description (after its ``BINLOG``
    statement, which the caller writes): the same for the driver's sink and for a task
    (``SqlChunk``). ``load_file(data)`` writes a LOAD DATA's bytes and gives the path
    (None: ``Declined``)."""

    def __init__(self, load_file=None):
        self.load_file = load_file
        self.tables, self.collector = {}, None  # decoded TABLE_MAPs; the change counter

    def transaction(self, trx, fde, checksum, write):
        """Write (``write(str or bytes)``) the statements of one transaction."""
        def statement(sql):
            write(sql)
            write(_END)

        write(f"-- {trx.gtid or '-'} {trx.file}:{trx.start}-{trx.end}\n")
        write(f"-- at {iso(trx.commit_ts)}: {self._changes(trx, fde, checksum)}\n")
        session = gtid_session(trx)
        for sql in session:
            statement(sql)
        rows = RowText(trx, fde, checksum, self.tables)
        for kind, what in transaction_steps(trx, fde, checksum):
            if kind == "binlog":
                statement(binlog_bytes(what))
                for chunk in rows.text(what):
                    write(chunk)
            elif kind == "load":
                if self.load_file is None:
                    raise Declined("LOAD DATA")
                statement(what.statement(self.load_file(what.data)))
            else:
                statement(what)
        if session and mysql_gtid(trx):  # MySQL wants gtid_next set again before anything
            statement(MYSQL_GTID_AUTOMATIC)

    def _changes(self, trx, fde, checksum):
        """The transaction's changes as one line (``summary.format_changes``)."""
        if self.collector is None or self.collector.fde is not fde:
            self.collector = ChangeCollector(fde, checksum)
        for event in trx.events:
            self.collector.event(event)
        return format_changes(self.collector.finish())


class SqlChunk:
    """Task side of --sql: one file's chosen transactions as the file's text, which the
    driver writes in commit order (``SqlFileSink.adopt``), so the rows are turned into
    text on every core. Where the task sees the driver's disk (``spec.dir`` holds
    ``spec.token``: local[*], or an executor on the driver's host) the text goes to a
    file there, a chunk at a time, whatever its size; elsewhere it is handed back, up to
    ``spec.max_bytes``. ``Declined`` (the driver writes that file itself) past that
    or at a LOAD DATA. ``spec``: a ``writers.SqlTaskWriter``."""

    declined = Declined

    def __init__(self, spec, fde_event):
        self.most, self.fde_event = spec.max_bytes, fde_event
        self.text, self.parts, self.size, self.transactions = SqlText(), [], 0, 0
        self.path = self.file = None
        if self.shared(spec):
            self.path = os.path.join(spec.dir, f"{spec.seq:06d}-{uuid.uuid4().hex}.sql")
            self.file = open(self.path, "wb", buffering=CHUNK)

    @staticmethod
    def shared(spec):
        """Whether this task sees the driver's ``FILE.parts`` (its token file there)."""
        return bool(spec.dir) and os.path.exists(os.path.join(spec.dir, spec.token))

    def apply(self, trx, fde, checksum):
        """Add one transaction's text."""
        try:
            self.text.transaction(trx, fde, checksum, self._add)
        except BaseException:
            self.discard()
            raise
        self.transactions += 1

    def _add(self, text):
        data = text if isinstance(text, bytes) else text.encode("utf-8")
        if self.file is not None:
            self.file.write(data)
            return
        self.size += len(data)
        if self.size > self.most:
            raise Declined(f"more than {self.most} bytes of text")
        self.parts.append(data)

    def discard(self):
        """Remove what was written (a task that fails or declines)."""
        if self.file is not None:
            self.file.close()
            os.unlink(self.path)
            self.file = None

    def close(self):
        """What the driver adopts: the text (or the file that holds it), its format
        description, the count."""
        written = {"fde": self.fde_event, "transactions": self.transactions}
        if self.file is None:
            return dict(written, sql=b"".join(self.parts))
        self.file.close()
        return dict(written, path=self.path)


class SqlFileSink(Sink):
    """--sql FILE: the same statements, written out for review (a dry run). The tasks
    write each file's text (``task_spec``: ``SqlChunk``), the driver adopts it in commit
    order; a file a task declined comes to ``apply`` instead. ``fsync``: what makes the
    finished file and its rename durable (``os.fsync``)."""

    def __init__(self, path, task_bytes=TASK_BYTES, fsync=os.fsync):
        self.path, self.f, self.fde, self.text = path, None, None, None
        self.partial = f"{path}.partial"
        self.loads, self.task_bytes, self.fsync = 0, task_bytes, fsync
        self.spool, self.token = os.path.abspath(f"{path}.parts"), None

    def check(self):
        """UsageError when FILE cannot be written: its folder missing, or a folder itself
        (before anything runs; a replay never makes folders the user did not)."""
        folder = os.path.dirname(os.path.abspath(self.path))
        if not os.path.isdir(folder):
            raise UsageError(f"--sql {self.path}: no folder {folder}")
        if os.path.isdir(self.path):
            raise UsageError(f"--sql {self.path}: a folder, not a file")
        return self

    def task_spec(self):
        """The tasks turn their transactions into text (``SqlChunk``): into files in
        ``FILE.parts/`` where they see it (its token file proves the same disk), else
        handed back, up to ``task_bytes`` of it per file."""
        if self.token is None:
            self.check()
            self.token = f".token-{uuid.uuid4().hex}"
            os.makedirs(self.spool, exist_ok=True)  # (FILE's own folder exists)
            open(os.path.join(self.spool, self.token), "wb").close()
        return SqlTaskWriter(max_bytes=self.task_bytes, dir=self.spool, token=self.token)

    def open(self, source):
        """Create the file and write its header (UsageError: ``check``)."""
        self.check()
        # binary: a statement from the binlog keeps its own bytes (its character set is
        # set just before it, as mysqlbinlog does)
        self.f = open(self.partial, "wb")
        self._write(HEADER)
        return self

    def _write(self, text):
        self.f.write(text if isinstance(text, bytes) else text.encode("utf-8"))

    def _statement(self, sql):
        self._write(sql)
        self._write(_END)

    def _format(self, fde_event, fde):
        """The file's format description, when it is another than the last one's."""
        if fde_event != self.fde:
            if self.fde is None:
                self._statement(PSEUDO_REPLICA[ev.is_mariadb_version(fde.server_version)])
            self._statement(binlog_statement([fde_event]))
            self.fde, self.text = fde_event, SqlText(self._load_file)

    def apply(self, trx, fde_event, checksum, fde):
        """Write the statements of one transaction (the format description when it changes)."""
        self._format(fde_event, fde)
        self.text.transaction(trx, fde, checksum, self._write)

    def adopt(self, written, transactions):
        """Write the text a file's task made (``SqlChunk.close``) of ``transactions``, the
        ones the driver chose to apply of that file."""
        if written["transactions"] != len(transactions):
            raise RuntimeError(f"a task wrote {written['transactions']} transactions of "
                               f"{transactions[0].file if transactions else 'a file'}, the "
                               f"replay applies {len(transactions)}")
        if not transactions:
            return
        self._format(written["fde"], ev.parse_format_description(written["fde"]))
        if "sql" in written:
            self._write(written["sql"])
            return
        _append_file(written["path"], self.f)
        os.unlink(written["path"])

    def _load_file(self, data):
        """The absolute path of a new file beside the SQL file holding ``data``."""
        folder = os.path.abspath(f"{self.path}.load")
        os.makedirs(folder, exist_ok=True)
        self.loads += 1
        path = os.path.join(folder, f"{self.loads:06d}.data")
        with open(path, "wb") as f:
            f.write(data)
        return path

    def failed(self):
        """The replay stopped on an error: the file says so in its last line."""
        if self.f and not self.f.closed:
            self._write(INCOMPLETE)

    def close(self):
        """Close the file (still ``FILE.partial``); remove the tasks' files (``FILE.parts``:
        those of files the replay did not adopt)."""
        if self.f:
            self.f.close()
        if self.token is not None:
            shutil.rmtree(self.spool, ignore_errors=True)
            self.token = None

    def finish(self, summary=None):
        """The replay ended well (after ``close``): the file, fsynced, takes its name
        durably (``durable.replace``)."""
        if self.f is None:  # nothing to replay: the header alone
            self.open(None)
            self.close()
        with open(self.partial, "ab") as f:
            f.write(b"DELIMITER ;\n")
            f.flush()
            self.fsync(f.fileno())
        durable.replace(self.partial, self.path, self.fsync)


def _append_file(path, out):
    """Append the file at ``path`` to the buffered binary file ``out``: copied by the
    kernel (``copy_file_range``: 0.12 s for 429 MB where a read and write loop took
    0.77), else a MiB at a time (a kernel or file system that cannot)."""
    out.flush()
    with open(path, "rb") as f:
        size, done = os.fstat(f.fileno()).st_size, 0
        try:
            while done < size:
                copied = os.copy_file_range(f.fileno(), out.fileno(), size - done)
                if copied == 0:
                    break
                done += copied
        except OSError:  # EXDEV, EINVAL, ENOSYS...: the loop goes on from ``done``
            pass
        out.seek(0, os.SEEK_END)  # the buffered file's idea of its position, again
        if done < size:
            f.seek(done)
            shutil.copyfileobj(f, out, CHUNK)

