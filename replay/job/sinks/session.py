"""One connection to the replay's target (network I/O).

The target keeps what is applied in ``mysqlbackup_replay``: a checkpoint row
per worker (written inside each applied transaction) and the announcement of a
DDL in flight (``pending_ddl``). A session sends the statements of a script:
SQL text, the source's own statement bytes, and BINLOG statements of row events
(on MariaDB their base64 bound to a prepared SET, see ``TargetSession.binlog``).
"""

import base64
import os
import tempfile

import pymysql
from pymysql.constants import CLIENT

from mysqlbackup.errors import SourceError
from mysqlbackup.source.connect import ACCESS_DENIED, denied, tls_failure
from mysqlbackup.source.connect import connect as tls_connect
from mysqlbackup.source.protocol import (COM_STMT_EXECUTE, COM_STMT_PREPARE, parse_prepare_ok,
                                         stmt_execute_blob_args)
from replay.job.sinks.statements import LoadData, binlog_statement

CHECKPOINT_DDL = (
    "CREATE TABLE IF NOT EXISTS mysqlbackup_replay.checkpoint (source VARCHAR(128) NOT NULL, "
    "worker SMALLINT NOT NULL DEFAULT 0, file VARCHAR(255) NOT NULL, pos BIGINT NOT NULL, "
    "gtid TEXT, updated TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6), "
    "PRIMARY KEY (source, worker)) ENGINE=InnoDB")
# a table made before there were workers gets its column (the row becomes worker 0)
CHECKPOINT_MIGRATE = (
    "ALTER TABLE mysqlbackup_replay.checkpoint ADD COLUMN worker SMALLINT NOT NULL DEFAULT 0 "
    "AFTER source, DROP PRIMARY KEY, ADD PRIMARY KEY (source, worker)")
# a statement that commits by itself (DDL) is announced here first, and the row goes in
# the commit of its checkpoint: a row left over means it ran, or not, when cut off
PENDING_DDL = (
    "CREATE TABLE IF NOT EXISTS mysqlbackup_replay.pending_ddl (source VARCHAR(128) NOT NULL "
    "PRIMARY KEY, file VARCHAR(255) NOT NULL, start BIGINT NOT NULL, gtid VARCHAR(128), "
    "since TIMESTAMP(6) NOT NULL DEFAULT CURRENT_TIMESTAMP(6)) ENGINE=InnoDB")
LOCK_WAIT_TIMEOUT = 10  # s; a parallel batch that waits longer is redone one by one
# MariaDB: BINLOG reads its base64 from two user variables (and empties them)
FRAGMENT_SET = "SET @binlog_fragment_0 = ?, @binlog_fragment_1 = ''"
FRAGMENT_BINLOG = "BINLOG @binlog_fragment_0, @binlog_fragment_1"
TARGET_PASSWORD_FROM = ("MYSQLBACKUP_TARGET_PASSWORD, MYSQLBACKUP_PASSWORD or "
                        "--target-password-file")


def connect(spec):
    """A TargetSession on a new connection to ``spec`` (autocommit, multi-statements,
    LOAD DATA LOCAL, its TLS settings), in pseudo-replica mode as the engines' binlog
    readers start their output (``TargetSession.pseudo_replica``)."""
    session = TargetSession(connect_target(spec, client_flag=CLIENT.MULTI_STATEMENTS,
                                           local_infile=True))
    session.pseudo_replica()
    return session


def connect_target(spec, **kwargs):
    """A PyMySQL connection to the target ``spec`` (autocommit); SourceError (exit 3)
    naming the target when it cannot be made: a TLS failure, a refused login."""
    try:
        return tls_connect(spec, autocommit=True, connect_timeout=15, **kwargs)
    except pymysql.err.OperationalError as e:
        if e.args and e.args[0] == ACCESS_DENIED:
            raise denied(spec, TARGET_PASSWORD_FROM) from None
        failure = tls_failure(e, spec)
        raise SourceError(f"cannot connect to the target {spec.address}: "
                          f"{failure or e.args[-1]}") from None


class TargetSession:
    """One connection to the target (a worker), with the format description it has."""

    def __init__(self, conn):
        self.conn, self.fde = conn, None
        # the client reads a local file only for our own LOAD DATA (``load``): a server
        # asking at any other time is refused
        conn._local_infile = False
        self.fragment_stmt = None  # id of the prepared FRAGMENT_SET
        # MySQL: a format description applied with BINLOG leaves gtid_next to be set
        # (ANONYMOUS, refused under GTID_MODE=ON): the statement that sets it back
        self.after_fde = None

    def run(self, *statements):
        """Run ``statements`` in order; the rows of the last one."""
        rows = None
        with self.conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
                rows = cur.fetchall()
                while cur.nextset():
                    pass
        return rows

    def pseudo_replica(self):
        """Pseudo-replica mode (``pseudo_slave_mode``, MySQL's ``pseudo_replica_mode``),
        as ``mariadb-binlog``/``mysqlbinlog`` output sets it: an XA transaction is let go
        of at XA PREPARE, so that the session goes on with the next transaction."""
        mariadb = "mariadb" in self.run("SELECT VERSION()")[0][0].lower()
        self.run(f"SET @@session.{'pseudo_slave_mode' if mariadb else 'pseudo_replica_mode'}"
                 " = 1")

    def create_tables(self, logged=False):
        """The checkpoint and pending_ddl tables: unlogged (they invent no GTID), or
        ``logged`` on a live server, whose replicas then get the checkpoint rows too."""
        self.run(f"SET SESSION sql_log_bin={int(logged)}",
                 "CREATE DATABASE IF NOT EXISTS mysqlbackup_replay", CHECKPOINT_DDL, PENDING_DDL)
        if not self.run("SHOW COLUMNS FROM mysqlbackup_replay.checkpoint LIKE 'worker'"):
            self.run(CHECKPOINT_MIGRATE)
        self.run("SET SESSION sql_log_bin=1")

    def use_fde(self, fde_event):
        """Send the file's format description once per connection (and per change)."""
        if fde_event != self.fde:
            self.run(binlog_statement([fde_event]), *filter(None, [self.after_fde]))
            self.fde = fde_event

    def send(self, packet, fragments):
        """One packet of a script: SQL text or bytes, a LoadData or a BinlogPacket."""
        if isinstance(packet, BinlogPacket):
            return self.binlog(packet.events, packet.before, fragments)
        if isinstance(packet, LoadData):
            return self.load(packet)
        return self.run(packet)

    def load(self, load):
        """Run a LOAD DATA LOCAL INFILE of ``load``'s bytes: they go to a private file for
        the statement's time (the client sends the file the server then asks for)."""
        fd, path = tempfile.mkstemp(prefix="mysqlbackup-load-")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(load.data)
            self.conn._local_infile = True
            return self.run(load.statement(path))
        finally:
            self.conn._local_infile = False
            os.unlink(path)

    def binlog(self, events, before="", fragments=True):
        """Apply whole events with BINLOG after ``before`` (statements in the same
        packet). ``fragments`` (MariaDB): the base64 is bound to a prepared SET as a
        parameter, so the server does not lex megabytes of text (a third of its work);
        BINLOG empties the variables as it reads them, so a failed bind can never
        replay older events. Otherwise a ``BINLOG '...'`` literal."""
        if not fragments:
            return self.run(before + binlog_statement(events))
        if self.fragment_stmt is None:
            self.fragment_stmt = self._prepare(FRAGMENT_SET)
        value = base64.b64encode(b"".join(events))
        self.conn._execute_command(COM_STMT_EXECUTE,
                                   stmt_execute_blob_args(self.fragment_stmt, value))
        self.conn._read_packet()  # OK, or raises the server's error
        return self.run(before + FRAGMENT_BINLOG)

    def _prepare(self, sql):
        """Server-side prepared statement id (pymysql has none: its packet calls)."""
        self.conn._execute_command(COM_STMT_PREPARE, sql)
        stmt_id, columns, params = parse_prepare_ok(self.conn._read_packet().get_all_data())
        for _ in range(params + bool(params) + columns + bool(columns)):  # defs, then EOF
            self.conn._read_packet()
        return stmt_id

    def rollback(self):
        """ROLLBACK, ignoring a failure (the connection may be gone)."""
        try:
            self.run("ROLLBACK")
        except pymysql.err.MySQLError:
            pass

    def close(self):
        """Close the connection."""
        self.conn.close()


class BinlogPacket:
    """Statements (each ending in ';' and a newline), then one BINLOG of ``events``."""

    def __init__(self, before, events):
        self.before, self.events = before, events
