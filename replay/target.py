"""Apply transactions to a MySQL/MariaDB target, exactly once (network I/O).

What is already applied comes from the target itself: its ``@@gtid_binlog_pos``
(the original GTIDs are kept, so a target with a binlog records them in the
same commit) and a checkpoint row in ``mysqlbackup_replay.checkpoint`` written
inside each applied transaction. A crash at any point and a re-run therefore
apply every transaction once. Setup writes are never binlogged, so they never
invent a GTID in the source's domain.

The target user needs SUPER (MariaDB 10.5+: BINLOG REPLAY for BINLOG
statements, plus REPLICATION SLAVE ADMIN or SUPER to set gtid_seq_no and
server_id), and CREATE/INSERT/UPDATE on ``mysqlbackup_replay``.
"""

import pymysql
from pymysql.constants import CLIENT

from mysqlbackup.errors import MysqlBackupError, SourceError
from mysqlbackup.gtid import MariaGtidPos
from mysqlbackup.names import binlog_sort_key

from .statements import binlog_statement, gtid_session, transaction_steps

CHECKPOINT_DDL = (
    "CREATE TABLE IF NOT EXISTS mysqlbackup_replay.checkpoint (source VARCHAR(128) PRIMARY "
    "KEY, file VARCHAR(255) NOT NULL, pos BIGINT NOT NULL, gtid TEXT, updated TIMESTAMP(6) "
    "NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB")


class ApplyError(MysqlBackupError):
    """The target refused a transaction: names the transaction and the server's error."""


class TargetApplier:
    """Applies transactions in order on one connection."""

    def __init__(self, spec):
        self.spec, self.source = spec, None
        self.conn = None
        self.fde = None
        self.applied = MariaGtidPos()
        self.position = None   # (file, end) of the last applied transaction
        self.binlog = False

    def open(self, source):
        """Connect, create the checkpoint table (unlogged) and read what is applied."""
        self.source = source
        try:
            self.conn = pymysql.connect(host=self.spec.host, port=self.spec.port,
                                        user=self.spec.user, password=self.spec.password,
                                        autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)
        except pymysql.err.OperationalError as e:
            raise SourceError(f"cannot connect to the target {self.spec.address}: "
                              f"{e.args[-1]}") from None
        self._run("SET SESSION sql_log_bin=0", "CREATE DATABASE IF NOT EXISTS mysqlbackup_replay",
                  CHECKPOINT_DDL, "SET SESSION sql_log_bin=1")
        self._load_state()
        return self

    def _load_state(self):
        rows = self._run("SELECT @@log_bin, @@gtid_binlog_pos")
        self.binlog = bool(int(rows[0][0]))
        if self.binlog and rows[0][1]:
            self.applied = MariaGtidPos.parse(rows[0][1])
        row = self._run("SELECT file, pos, gtid FROM mysqlbackup_replay.checkpoint "
                        f"WHERE source = {self._quote(self.source)}")
        if row:
            self.position = (row[0][0], int(row[0][1]))
            for d, (s, n) in MariaGtidPos.parse(row[0][2] or "").domains.items():
                self.applied.add(d, s, n)

    def is_applied(self, trx):
        """True when the target already has this transaction."""
        parts = trx.get("gtid_parts")
        if parts and len(parts) == 3 and isinstance(parts[0], int):
            return self.applied.contains(*parts)
        return self.position is not None and _not_after((trx["file"], trx["end"]),
                                                        self.position)

    def apply(self, trx, fde_event, checksum, fde):
        """Apply one transaction with its checkpoint, in one commit where it can."""
        if fde_event != self.fde:
            self._run(binlog_statement([fde_event]))
            self.fde = fde_event
        steps = transaction_steps(trx, fde, checksum)
        session = gtid_session(trx)
        packets, current = [], [session] if session else []
        for kind, sql in steps:
            if kind == "commit":
                current += [self._checkpoint_sql(trx), sql]
                continue
            current.append(sql)
            if kind == "binlog":  # a BINLOG statement must end its packet
                packets.append(current)
                current = []
        if current:
            packets.append(current)
        standalone = steps[-1][0] != "commit"
        try:
            for packet in packets:
                self._run(";\n".join(packet))
            if standalone:  # DDL commits by itself: record it, unlogged
                self._run("SET SESSION sql_log_bin=0", self._checkpoint_sql(trx),
                          "SET SESSION sql_log_bin=1")
        except pymysql.err.MySQLError as e:
            self._rollback()
            raise ApplyError(f"the target refused transaction {trx.get('gtid') or ''} at "
                             f"{trx['file']}:{trx['start']}: {e.args[-1]}") from None
        self._mark(trx)

    def _checkpoint_sql(self, trx):
        gtids = self.applied.copy()
        parts = trx.get("gtid_parts")
        if parts and len(parts) == 3 and isinstance(parts[0], int):
            gtids.add(*parts)
        return ("INSERT INTO mysqlbackup_replay.checkpoint (source, file, pos, gtid) VALUES "
                f"({self._quote(self.source)}, {self._quote(trx['file'])}, {trx['end']}, "
                f"{self._quote(str(gtids))}) ON DUPLICATE KEY UPDATE file=VALUES(file), "
                "pos=VALUES(pos), gtid=VALUES(gtid), updated=CURRENT_TIMESTAMP(6)")

    def _mark(self, trx):
        parts = trx.get("gtid_parts")
        if parts and len(parts) == 3 and isinstance(parts[0], int):
            self.applied.add(*parts)
        self.position = (trx["file"], trx["end"])

    def _run(self, *statements):
        rows = None
        with self.conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
                rows = cur.fetchall()
                while cur.nextset():
                    pass
        return rows

    def _rollback(self):
        try:
            self._run("ROLLBACK")
        except pymysql.err.MySQLError:
            pass

    def _quote(self, value):
        return self.conn.escape(value)

    def close(self):
        if self.conn is not None:
            self.conn.close()


def _not_after(a, b):
    """(file, pos) a is at or before b, comparing binlog files by sequence number."""
    return (binlog_sort_key(a[0]), a[1]) <= (binlog_sort_key(b[0]), b[1])


class SqlFileSink:
    """--sql FILE: the same statements, written out for review (a dry run)."""

    def __init__(self, path):
        self.path, self.f, self.fde = path, None, None

    def open(self, source):
        self.f = open(self.path, "w", encoding="utf-8")
        self.f.write("-- mysqlbackup replay: apply with `mariadb < FILE` (user with SUPER)\n")
        return self

    def is_applied(self, trx):
        return False

    def apply(self, trx, fde_event, checksum, fde):
        if fde_event != self.fde:
            self.f.write(binlog_statement([fde_event]) + ";\n")
            self.fde = fde_event
        self.f.write(f"-- {trx.get('gtid') or ''} {trx['file']}:{trx['start']}-{trx['end']}\n")
        session = gtid_session(trx)
        if session:
            self.f.write(session + ";\n")
        for _, sql in transaction_steps(trx, fde, checksum):
            self.f.write(sql + ";\n")

    def close(self):
        if self.f:
            self.f.close()
