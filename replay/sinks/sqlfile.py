"""--sql FILE: the replay written out as SQL for review (a dry run; file I/O)."""

from replay.sinks.base import Sink
from replay.sinks.statements import (MYSQL_GTID_AUTOMATIC, binlog_statement, gtid_session,
                                     mysql_gtid, step_sql, transaction_steps)

HEADER = ("-- mysqlbackup replay: apply with `mariadb < FILE` or MySQL's `mysql < FILE`, as "
          "a user with SUPER (MySQL: BINLOG_ADMIN and REPLICATION_APPLIER)\n")


class SqlFileSink(Sink):
    """--sql FILE: the same statements, written out for review (a dry run)."""

    def __init__(self, path):
        self.path, self.f, self.fde = path, None, None

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
            self.fde = fde_event
        self._write(f"-- {trx.gtid or ''} {trx.file}:{trx.start}-{trx.end}\n")
        session = gtid_session(trx)
        if session:
            self._write(session + ";\n")
        for kind, what in transaction_steps(trx, fde, checksum):
            self._write(step_sql(kind, what))
            self._write(";\n")
        if session and mysql_gtid(trx):  # MySQL wants gtid_next set again before anything
            self._write(MYSQL_GTID_AUTOMATIC + ";\n")

    def close(self):
        """Close the file."""
        if self.f:
            self.f.close()
