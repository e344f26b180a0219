"""--sql FILE: the replay written out as SQL for review (a dry run; file I/O).

Each transaction is headed by ``-- GTID FILE:START-END`` (scripts parse that line: it
keeps its shape) and ``-- at TIME: CHANGES`` (its commit time, UTC, and per table and
kind the rows it changes: ``summary.format_changes``); after each BINLOG statement come
its rows as ``###`` comments, a row a line, and the annotated queries as ``#Q>``
(``rowtext``), as ``mysqlbinlog -v`` writes them.
"""

from mysqlbackup.archive.index import utc
from replay.job.decoding.rowtext import ROW_CAP, VALUE_CAP, RowText
from replay.job.decoding.summary import ChangeCollector, format_changes
from replay.job.sinks.base import Sink
from replay.job.sinks.statements import (MYSQL_GTID_AUTOMATIC, binlog_statement, gtid_session,
                                     mysql_gtid, step_sql, transaction_steps)

HEADER = ("-- mysqlbackup replay: apply with `mariadb < FILE` or MySQL's `mysql < FILE`, as "
          "a user with SUPER (MySQL: BINLOG_ADMIN and REPLICATION_APPLIER)\n"
          "-- each transaction: '-- GTID FILE:START-END', '-- at COMMIT_TIME: TABLE KIND ROWS, "
          "...'; after each BINLOG statement its rows as '### ' comments, a row a line "
          f"(values cut after {VALUE_CAP} characters, a row after {ROW_CAP}), and the "
          "annotated query as '#Q> '\n")


class SqlFileSink(Sink):
    """--sql FILE: the same statements, written out for review (a dry run)."""

    def __init__(self, path):
        self.path, self.f, self.fde, self.collector, self.tables = path, None, None, None, {}

    def open(self, source):
        """Create the file and write its header."""
        # binary: a statement from the binlog keeps its own bytes (its character set is
        # set just before it, as mysqlbinlog does)
        self.f = open(self.path, "wb")
        self._write(HEADER)
        return self

    def _write(self, text):
        self.f.write(text if isinstance(text, bytes) else text.encode("utf-8"))

    def apply(self, trx, fde_event, checksum, fde):
        """Write the statements of one transaction (the format description when it changes)."""
        if fde_event != self.fde:
            self._write(binlog_statement([fde_event]) + ";\n")
            self.fde, self.tables = fde_event, {}
        self._write(f"-- {trx.gtid or '-'} {trx.file}:{trx.start}-{trx.end}\n")
        self._write(f"-- at {utc(trx.commit_ts)}: {self._changes(trx, fde, checksum)}\n")
        session = gtid_session(trx)
        if session:
            self._write(session + ";\n")
        rows = RowText(trx, fde, checksum, self.tables)
        for kind, what in transaction_steps(trx, fde, checksum):
            self._write(step_sql(kind, what))
            self._write(";\n")
            if kind == "binlog":
                for line in rows.lines(what):
                    self._write(line + "\n")
        if session and mysql_gtid(trx):  # MySQL wants gtid_next set again before anything
            self._write(MYSQL_GTID_AUTOMATIC + ";\n")

    def _changes(self, trx, fde, checksum):
        """The transaction's changes as one line (``summary.format_changes``)."""
        if self.collector is None or self.collector.fde is not fde:
            self.collector = ChangeCollector(fde, checksum)
        for event in trx.events:
            self.collector.event(event)
        return format_changes(self.collector.finish())

    def close(self):
        """Close the file."""
        if self.f:
            self.f.close()
