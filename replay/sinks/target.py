"""Apply transactions to a MySQL/MariaDB target, exactly once (network I/O).

What is already applied comes from the target itself: its ``@@gtid_binlog_pos``
(the original GTIDs are kept, so a target with a binlog records them in the
same commit) and a checkpoint row in ``mysqlbackup_replay.checkpoint`` written
inside each applied transaction. A crash at any point and a re-run therefore
apply every transaction once. A DDL commits by itself, so it is announced in
``mysqlbackup_replay.pending_ddl`` before it runs and the row is deleted in the
commit of its checkpoint; a re-run that finds the row and gets from that DDL the
error its kind gives when it runs twice (``errors_if_already_applied``) records
it as applied (MariaDB DDL is atomic). Setup writes are never binlogged, so
they never invent a GTID in the source's domain.

The target user needs SUPER (MariaDB 10.5+: BINLOG REPLAY for BINLOG
statements, plus REPLICATION SLAVE ADMIN or SUPER to set gtid_seq_no and
server_id), and CREATE/INSERT/UPDATE/DELETE on ``mysqlbackup_replay``.
"""

import base64
import logging
import threading

import pymysql
from pymysql.constants import CLIENT

from mysqlbackup.errors import MysqlBackupError, SourceError
from mysqlbackup.binlog.gtid import MariaGtidPos
from mysqlbackup.binlog.names import binlog_sort_key
from mysqlbackup.source.protocol import (COM_STMT_EXECUTE, COM_STMT_PREPARE, parse_prepare_ok,
                                  stmt_execute_blob_args)
from mysqlbackup.binlog.query_vars import RESET_SESSION

from replay.decoding.groups import batches
from replay.sinks.statements import (BINLOG_CAP, binlog_chunks, binlog_statement,
                         errors_if_already_applied, gtid_session, mergeable, row_events,
                         step_sql, transaction_steps)

log = logging.getLogger(__name__)

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
MERGE_BYTES = 16 << 20  # raw row-event bytes one merged target commit gathers at most
# MariaDB: BINLOG reads its base64 from two user variables (and empties them)
FRAGMENT_SET = "SET @binlog_fragment_0 = ?, @binlog_fragment_1 = ''"
FRAGMENT_BINLOG = "BINLOG @binlog_fragment_0, @binlog_fragment_1"


class ApplyError(MysqlBackupError):
    """The target refused a transaction: names the transaction and the server's error."""


class _Session:
    """One connection to the target (a worker), with the format description it has."""

    def __init__(self, conn):
        self.conn, self.fde = conn, None
        self.fragment_stmt = None  # id of the prepared FRAGMENT_SET

    def run(self, *statements):
        rows = None
        with self.conn.cursor() as cur:
            for sql in statements:
                cur.execute(sql)
                rows = cur.fetchall()
                while cur.nextset():
                    pass
        return rows

    def use_fde(self, fde_event):
        """Send the file's format description once per connection (and per change)."""
        if fde_event != self.fde:
            self.run(binlog_statement([fde_event]))
            self.fde = fde_event

    def send(self, packet, fragments):
        """One packet of a plan: SQL text or bytes, or a BinlogPacket."""
        if isinstance(packet, BinlogPacket):
            return self.binlog(packet.events, packet.before, fragments)
        return self.run(packet)

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
        try:
            self.run("ROLLBACK")
        except pymysql.err.MySQLError:
            pass

    def close(self):
        self.conn.close()


class BinlogPacket:
    """Statements (each ending in ';' and a newline), then one BINLOG of ``events``."""

    def __init__(self, before, events):
        self.before, self.events = before, events


class _Plan:
    """The packets of one transaction: its body, then what commits it."""

    def __init__(self, trx, body, commit):
        self.trx, self.body, self.commit = trx, body, commit
        self.ddl_at = None  # index in body of a statement that commits by itself


class TargetApplier:
    """Applies transactions in commit order; a batch of one commit group runs on up to
    ``workers`` connections side by side, and still commits in the original order."""

    def __init__(self, spec, workers=1, merge=1):
        self.spec, self.source = spec, None
        self.workers = max(1, workers)
        self.merge = max(1, merge)  # source transactions per target commit (no binlog)
        self.cap = BINLOG_CAP       # raw bytes per BINLOG statement (max_allowed_packet)
        self.commits = 0            # target commits made
        self.mariadb = False        # BINLOG from user variables (fragments) works
        self.pending_ddl = None     # (file, start) of a DDL an earlier run was cut off in
        self.sessions = []
        self.applied = MariaGtidPos()
        self.position = None   # (file, end) of the last applied transaction
        self.binlog = False
        self.parallel_applied = 0  # transactions that ran beside another one
        self.most_workers = 1      # the most connections one batch used

    def open(self, source):
        """Connect, create the checkpoint table (unlogged) and read what is applied."""
        self.source = source
        self.sessions = [_Session(self._connect())]
        first = self.sessions[0]
        first.run("SET SESSION sql_log_bin=0", "CREATE DATABASE IF NOT EXISTS mysqlbackup_replay",
                  CHECKPOINT_DDL, PENDING_DDL)
        if not first.run("SHOW COLUMNS FROM mysqlbackup_replay.checkpoint LIKE 'worker'"):
            first.run(CHECKPOINT_MIGRATE)
        first.run("SET SESSION sql_log_bin=1")
        self._load_state()
        self.sessions += [_Session(self._connect()) for _ in range(1, self.workers)]
        for session in self.sessions:
            session.run(f"SET SESSION innodb_lock_wait_timeout={LOCK_WAIT_TIMEOUT}")
        return self

    def _connect(self):
        try:
            return pymysql.connect(host=self.spec.host, port=self.spec.port,
                                   user=self.spec.user, password=self.spec.password,
                                   autocommit=True, client_flag=CLIENT.MULTI_STATEMENTS)
        except pymysql.err.OperationalError as e:
            raise SourceError(f"cannot connect to the target {self.spec.address}: "
                              f"{e.args[-1]}") from None

    def _load_state(self):
        """Applied GTIDs and position: the target's binlog and the newest checkpoint row
        (commits are in order, so the newest row's position covers all before it)."""
        run = self.sessions[0].run
        rows = run("SELECT @@log_bin, @@gtid_binlog_pos, @@max_allowed_packet, VERSION()")
        self.binlog = bool(int(rows[0][0]))
        self.mariadb = "mariadb" in rows[0][3].lower()
        self.cap = min(self.cap, int(rows[0][2]) // 4)  # base64 takes 4/3; room to spare
        if self.binlog and rows[0][1]:
            self.applied = MariaGtidPos.parse(rows[0][1])
        pending = run("SELECT file, start FROM mysqlbackup_replay.pending_ddl WHERE source = "
                      f"{self._quote(self.source)}")
        self.pending_ddl = (pending[0][0], int(pending[0][1])) if pending else None
        for file, pos, gtid in run("SELECT file, pos, gtid FROM mysqlbackup_replay.checkpoint "
                                   f"WHERE source = {self._quote(self.source)}"):
            if self.position is None or _not_after(self.position, (file, int(pos))):
                self.position = (file, int(pos))
            for d, (s, n) in MariaGtidPos.parse(gtid or "").domains.items():
                self.applied.add(d, s, n)

    def is_applied(self, trx):
        """True when the target already has this transaction."""
        parts = _gtid_parts(trx)
        if parts:
            return self.applied.contains(*parts)
        return self.position is not None and _not_after((trx["file"], trx["end"]),
                                                        self.position)

    def apply_many(self, transactions, fde_event, checksum, fde):
        """Apply transactions in order, doing as little per transaction as is safe.

        A target without a binlog keeps no GTIDs, so runs of row-only transactions
        share one commit (up to ``merge`` of them), the checkpoint row inside it;
        a target with a binlog gets every transaction under its own GTID, commit
        groups side by side on the workers (``apply_group``)."""
        if self.merge > 1 and not self.binlog:
            for unit in self._merge_units(transactions, checksum, fde):
                if len(unit) > 1:
                    self._apply_merged(unit, fde_event, fde, checksum)
                else:
                    self._apply_serially(unit, fde_event, fde, checksum)
            return
        for batch in batches(transactions):
            if len(batch) > 1:
                self.apply_group(batch, fde_event, checksum, fde)
            else:
                self._apply_serially(batch, fde_event, fde, checksum)

    def _merge_units(self, transactions, checksum, fde):
        """Consecutive runs of mergeable transactions (a limit of count and bytes);
        any other transaction is a run of its own."""
        unit, size = [], 0
        for trx in transactions:
            if not mergeable(trx, checksum, fde):
                if unit:
                    yield unit
                yield [trx]
                unit, size = [], 0
                continue
            trx_size = sum(len(e) for e in trx["events"])
            if unit and (len(unit) >= self.merge or size + trx_size > MERGE_BYTES):
                yield unit
                unit, size = [], 0
            unit.append(trx)
            size += trx_size
        if unit:
            yield unit

    def _apply_merged(self, unit, fde_event, fde, checksum):
        """One target commit for ``unit``; when the target refuses it, the unit is
        rolled back and applied one by one (which names the transaction at fault)."""
        gtids = self.applied.copy()
        for trx in unit[:-1]:
            if _gtid_parts(trx):
                gtids.add(*_gtid_parts(trx))
        chunks = binlog_chunks([e for t in unit for e in row_events(t)], fde, self.cap)
        session = self.sessions[0]
        try:
            session.use_fde(fde_event)
            for i, chunk in enumerate(chunks):
                session.binlog(chunk, "BEGIN;\n" if i == 0 else "", self.mariadb)
            session.run(self._checkpoint_sql(unit[-1], gtids, 0) + ";\nCOMMIT")
        except pymysql.err.MySQLError as e:
            session.rollback()
            if not _server_refused(e) or not session.conn.open:
                first, last = unit[0], unit[-1]
                raise ApplyError(
                    f"lost the target during one commit of {len(unit)} transactions "
                    f"({first.get('gtid') or ''}..{last.get('gtid') or ''} at "
                    f"{first['file']}:{first['start']}-{last['end']}): {e.args[-1] or e!r}; "
                    "run the replay again: it resumes from what the target committed"
                ) from None
            log.info("merged commit of %d transactions refused (%s); applying them one "
                     "by one", len(unit), e.args[-1])
            return self._apply_serially(unit, fde_event, fde, checksum)
        self.commits += 1
        for trx in unit:
            self._mark(trx)

    def apply_group(self, batch, fde_event, checksum, fde):
        """Apply transactions the binlog proves independent: bodies side by side on the
        workers, commits in the original order. A lock wait between them (the target is
        not the source) rolls the unfinished ones back and applies them one by one."""
        n = min(self.workers, len(batch))
        if n == 1:
            return self._apply_serially(batch, fde_event, fde, checksum)
        gtids, plans = self.applied.copy(), []
        for i, trx in enumerate(batch):
            plans.append(self._plan(trx, fde, checksum, gtids, i % n))  # slot i % n: worker
            if _gtid_parts(trx):
                gtids.add(*_gtid_parts(trx))
        turn = _Turn()
        threads = [threading.Thread(target=self._worker, args=(self.sessions[w],
                                                               plans[w::n], w, n, turn,
                                                               fde_event))
                   for w in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for plan in plans[:turn.next]:
            self._mark(plan.trx)
        self.commits += turn.next
        self.parallel_applied += turn.next
        self.most_workers = max(self.most_workers, n)
        if turn.next < len(plans):
            log.info("parallel batch stopped at %s (%s); applying the rest one by one",
                     plans[turn.next].trx.get("gtid"), turn.error[1])
            for session in self.sessions[:n]:
                session.rollback()
            self._apply_serially(batch[turn.next:], fde_event, fde, checksum)

    def _worker(self, session, plans, first, step, turn, fde_event):
        """One worker's share of a batch: run each body, wait for its turn, commit."""
        for k, plan in enumerate(plans):
            index = first + k * step
            try:
                session.use_fde(fde_event)
                for packet in plan.body:
                    session.send(packet, self.mariadb)
                if not turn.wait(index):
                    return
                session.run(plan.commit)
            except Exception as e:  # noqa: BLE001 - any failure ends the batch's parallel part
                turn.fail(index, e)
                return
            turn.done(index)

    def _apply_serially(self, transactions, fde_event, fde, checksum):
        session = self.sessions[0]
        for trx in transactions:
            plan, sent = self._plan(trx, fde, checksum, self.applied, 0), 0
            try:
                session.use_fde(fde_event)
                for packet in plan.body:
                    session.send(packet, self.mariadb)
                    sent += 1
                session.run(plan.commit)
                self.commits += 1
            except pymysql.err.MySQLError as e:
                session.rollback()
                if not self._ran_before(trx, e, session, plan):
                    if sent == plan.ddl_at:  # the DDL itself was refused: it did not run
                        self._withdraw(session)
                    raise ApplyError(f"the target refused transaction {trx.get('gtid') or ''} "
                                     f"at {trx['file']}:{trx['start']}: {e.args[-1]}") from None
            self._mark(plan.trx)

    def _ran_before(self, trx, error, session, plan):
        """True (and its checkpoint written) when ``trx`` is the DDL an earlier run was
        cut off in, and the target says it is already there (MariaDB DDL is atomic)."""
        if self.pending_ddl != (trx["file"], trx["start"]) or plan.ddl_at is None or \
                error.args[0] not in errors_if_already_applied(plan.body[plan.ddl_at]):
            return False
        log.warning("%s at %s:%s was cut off in an earlier run and the target already has "
                    "it (%s); recorded as applied", trx.get("gtid") or "the statement",
                    trx["file"], trx["start"], error.args[-1])
        session.run(RESET_SESSION, plan.commit)
        self.pending_ddl = None
        self.commits += 1
        return True

    def _withdraw(self, session):
        """Forget the announcement of a DDL the target refused (DDL is atomic)."""
        try:
            session.run("SET SESSION sql_log_bin=0", "DELETE FROM mysqlbackup_replay."
                        f"pending_ddl WHERE source = {self._quote(self.source)}",
                        "SET SESSION sql_log_bin=1")
        except pymysql.err.MySQLError:
            pass  # left announced: a re-run then checks what the target says

    def _plan(self, trx, fde, checksum, gtids, slot):
        """Packets of ``trx``: SQL text, the source's bytes, or a BinlogPacket (statements,
        then a BINLOG, which must end its packet); its checkpoint row (``slot``) goes
        with its commit."""
        steps = transaction_steps(trx, fde, checksum, self.cap)
        session = gtid_session(trx)
        packets, current = [], [session] if session else []
        checkpoint = self._checkpoint_sql(trx, gtids, slot)
        for kind, what in steps:
            if kind == "commit":
                continue  # the checkpoint row goes with the COMMIT: one packet
            if kind == "sql":
                current.append(what)
                continue
            before = "".join(sql + ";\n" for sql in current)
            if kind == "binlog":
                packets.append(BinlogPacket(before, what))
            else:  # the source's own bytes: a packet of their own
                packets += [before] if before else []
                packets.append(what)
            current = []
        if current:
            packets.append(";\n".join(current))
        if steps[-1][0] == "commit":
            return _Plan(trx, packets, f"{checkpoint};\nCOMMIT")
        # DDL commits by itself: announced before, recorded after (both unlogged)
        source = self._quote(self.source)
        announce = ("SET SESSION sql_log_bin=0;\nREPLACE INTO mysqlbackup_replay.pending_ddl "
                    f"(source, file, start, gtid) VALUES ({source}, {self._quote(trx['file'])}, "
                    f"{trx['start']}, {self._quote(trx.get('gtid') or '')});\n"
                    "SET SESSION sql_log_bin=1")
        plan = _Plan(trx, [announce] + packets, "SET SESSION sql_log_bin=0;\nBEGIN;\n"
                     f"{checkpoint};\nDELETE FROM mysqlbackup_replay.pending_ddl WHERE "
                     f"source = {source};\nCOMMIT;\nSET SESSION sql_log_bin=1")
        raw = [i for i, packet in enumerate(packets) if isinstance(packet, bytes)]
        plan.ddl_at = 1 + raw[0] if len(raw) == 1 else None  # after the announcement
        return plan

    def _checkpoint_sql(self, trx, gtids, slot):
        gtids = gtids.copy()
        if _gtid_parts(trx):
            gtids.add(*_gtid_parts(trx))
        return ("INSERT INTO mysqlbackup_replay.checkpoint (source, worker, file, pos, gtid) "
                f"VALUES ({self._quote(self.source)}, {slot}, {self._quote(trx['file'])}, "
                f"{trx['end']}, {self._quote(str(gtids))}) ON DUPLICATE KEY UPDATE "
                "file=VALUES(file), pos=VALUES(pos), gtid=VALUES(gtid), "
                "updated=CURRENT_TIMESTAMP(6)")

    def _mark(self, trx):
        if _gtid_parts(trx):
            self.applied.add(*_gtid_parts(trx))
        self.position = (trx["file"], trx["end"])

    def _quote(self, value):
        return self.sessions[0].conn.escape(value)

    def close(self):
        for session in self.sessions:
            session.close()
        self.sessions = []


class _Turn:
    """Commit order of a parallel batch: index i commits only after i - 1 did."""

    def __init__(self):
        self.next, self.error = 0, None
        self.failed = False
        self.cond = threading.Condition()

    def wait(self, index):
        """Block until it is ``index``'s turn; False when the batch failed before it."""
        with self.cond:
            while self.next != index and not self.failed:
                self.cond.wait()
            return not self.failed

    def done(self, index):
        with self.cond:
            self.next = index + 1
            self.cond.notify_all()

    def fail(self, index, error):
        with self.cond:
            self.failed = True
            self.error = self.error or (index, error)
            self.cond.notify_all()


def _server_refused(error):
    """True for an error the server sent (not a client or connection error, 2000-2999)."""
    code = error.args[0] if error.args and isinstance(error.args[0], int) else 0
    return code >= 1000 and not 2000 <= code < 3000


def _gtid_parts(trx):
    parts = trx.get("gtid_parts")
    return parts if parts and len(parts) == 3 and isinstance(parts[0], int) else None


def _not_after(a, b):
    """(file, pos) a is at or before b, comparing binlog files by sequence number."""
    return (binlog_sort_key(a[0]), a[1]) <= (binlog_sort_key(b[0]), b[1])


class SqlFileSink:
    """--sql FILE: the same statements, written out for review (a dry run)."""

    def __init__(self, path):
        self.path, self.f, self.fde = path, None, None

    def open(self, source):
        # binary: a statement from the binlog keeps its own bytes (its character set is
        # set just before it, as mysqlbinlog does)
        self.f = open(self.path, "wb")
        self._write("-- mysqlbackup replay: apply with `mariadb < FILE` (user with SUPER)\n")
        return self

    def _write(self, text):
        self.f.write(text if isinstance(text, bytes) else text.encode("utf-8"))

    def is_applied(self, trx):
        return False

    def apply(self, trx, fde_event, checksum, fde):
        if fde_event != self.fde:
            self._write(binlog_statement([fde_event]) + ";\n")
            self.fde = fde_event
        self._write(f"-- {trx.get('gtid') or ''} {trx['file']}:{trx['start']}-{trx['end']}\n")
        session = gtid_session(trx)
        if session:
            self._write(session + ";\n")
        for kind, what in transaction_steps(trx, fde, checksum):
            self._write(step_sql(kind, what))
            self._write(";\n")

    def close(self):
        if self.f:
            self.f.close()
