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

The statements go to ``FILE.partial`` until the replay ends well (``finish``), then to
FILE; a replay that fails leaves ``FILE.partial`` ending with a line that says so.
"""

import os

from mysqlbackup.utc import iso
from mysqlbackup.binlog import events as ev
from replay.job.decoding.rowtext import ROW_CAP, VALUE_CAP, RowText
from replay.job.decoding.summary import ChangeCollector, format_changes
from replay.job.sinks.base import Sink
from replay.job.sinks.statements import (MYSQL_GTID_AUTOMATIC, binlog_statement, gtid_session,
                                         mysql_gtid, transaction_steps)

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
INCOMPLETE = ("-- INCOMPLETE: the replay failed after the transaction above; this file "
              "stops there (do not load it as a whole replay)\n")


class SqlFileSink(Sink):
    """--sql FILE: the same statements, written out for review (a dry run)."""

    def __init__(self, path):
        self.path, self.f, self.fde, self.collector, self.tables = path, None, None, None, {}
        self.partial = f"{path}.partial"
        self.loads = 0

    def open(self, source):
        """Create the file and write its header."""
        # binary: a statement from the binlog keeps its own bytes (its character set is
        # set just before it, as mysqlbinlog does)
        self.f = open(self.partial, "wb")
        self._write(HEADER)
        return self

    def _write(self, text):
        self.f.write(text if isinstance(text, bytes) else text.encode("utf-8"))

    def _statement(self, sql):
        self._write(sql)
        self._write(f"\n{DELIMITER}\n")

    def apply(self, trx, fde_event, checksum, fde):
        """Write the statements of one transaction (the format description when it changes)."""
        if fde_event != self.fde:
            if self.fde is None:
                self._statement(PSEUDO_REPLICA[ev.is_mariadb_version(fde.server_version)])
            self._statement(binlog_statement([fde_event]))
            self.fde, self.tables = fde_event, {}
        self._write(f"-- {trx.gtid or '-'} {trx.file}:{trx.start}-{trx.end}\n")
        self._write(f"-- at {iso(trx.commit_ts)}: {self._changes(trx, fde, checksum)}\n")
        session = gtid_session(trx)
        for sql in session:
            self._statement(sql)
        rows = RowText(trx, fde, checksum, self.tables)
        for kind, what in transaction_steps(trx, fde, checksum):
            if kind == "binlog":
                self._statement(binlog_statement(what))
                for line in rows.lines(what):
                    self._write(line + "\n")
            elif kind == "load":
                self._statement(what.statement(self._load_file(what.data)))
            else:
                self._statement(what)
        if session and mysql_gtid(trx):  # MySQL wants gtid_next set again before anything
            self._statement(MYSQL_GTID_AUTOMATIC)

    def _load_file(self, data):
        """The absolute path of a new file beside the SQL file holding ``data``."""
        folder = os.path.abspath(f"{self.path}.load")
        os.makedirs(folder, exist_ok=True)
        self.loads += 1
        path = os.path.join(folder, f"{self.loads:06d}.data")
        with open(path, "wb") as f:
            f.write(data)
        return path

    def _changes(self, trx, fde, checksum):
        """The transaction's changes as one line (``summary.format_changes``)."""
        if self.collector is None or self.collector.fde is not fde:
            self.collector = ChangeCollector(fde, checksum)
        for event in trx.events:
            self.collector.event(event)
        return format_changes(self.collector.finish())

    def failed(self):
        """The replay stopped on an error: the file says so in its last line."""
        if self.f and not self.f.closed:
            self._write(INCOMPLETE)

    def close(self):
        """Close the file (still ``FILE.partial``)."""
        if self.f:
            self.f.close()

    def finish(self, summary=None):
        """The replay ended well (after ``close``): the file takes its name."""
        if self.f is None:  # nothing to replay: the header alone
            self.open(None)
            self.close()
        with open(self.partial, "ab") as f:
            f.write(b"DELIMITER ;\n")
        os.replace(self.partial, self.path)
