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

A MariaDB SEQUENCE's row (``NEXT VALUE FOR`` taking a new cache, ``SETVAL``) is
non-transactional: a client session that applies it inside a transaction makes the
target log it at once as a group of its own, under the GTID the session set for the
whole transaction, so the transaction's commit would log that GTID a second time
(refused under ``gtid_strict_mode``, a duplicate otherwise). On a target that logs the
source's GTIDs, a transaction's sequence rows are therefore applied just before it,
unlogged (``_sequence_rows``: the row is the sequence's whole state, so applying it
again after a crash changes nothing); the transaction's other rows and its checkpoint
row commit under its GTID. The target's binlog then lacks the sequence's row (its
replica applier, ``--apply native``, logs it with the rest).

A MariaDB target's ``gtid_current_pos`` reads a domain from its binlog only where
the last GTID there is of its own server_id; the source's GTIDs it logs are not, and
a target without a binlog logs none. So once a replay ends well, the target's
``gtid_slave_pos`` is set to the source's GTID state it reached (``start``, the base's
position, and every GTID applied), as a replica made from a backup is set up: its
``gtid_current_pos`` is then the source's at the stop point (MySQL's
``gtid_executed`` is that already).

The target user needs SUPER (MariaDB 10.5+: BINLOG REPLAY for BINLOG
statements, plus REPLICATION SLAVE ADMIN or SUPER to set gtid_seq_no and
server_id), and CREATE/INSERT/UPDATE/DELETE on ``mysqlbackup_replay``.
"""

import logging

import pymysql

from mysqlbackup.binlog.gtid import MariaGtidPos, MysqlGtidSet, guess_flavor, parse_gtid_set
from mysqlbackup.binlog.position import Position
from mysqlbackup.binlog.query_vars import RESET_SESSION
from mysqlbackup.errors import MysqlBackupError
from replay.job.decoding.groups import batches
from replay.job.sinks.base import Sink
from replay.job.sinks.parallel import run_batch
from replay.job.sinks.script import add_gtid, checkpoint_sql, script_transaction
from replay.job.sinks.session import LOCK_WAIT_TIMEOUT, connect
from replay.job.sinks.statements import (BINLOG_CAP, MYSQL_GTID_AUTOMATIC, binlog_chunks,
                                         errors_if_already_applied, mergeable, row_events,
                                         take_tables)

log = logging.getLogger(__name__)

MERGE_BYTES = 16 << 20  # raw row-event bytes one merged target commit gathers at most


class ApplyError(MysqlBackupError):
    """The target refused a transaction: names the transaction and the server's error."""


class TargetApplier(Sink):
    """Applies transactions in commit order; a batch of one commit group runs on up to
    ``workers`` connections side by side, and still commits in the original order."""

    def __init__(self, spec, workers=1, merge=1, keep_gtids=True, start=None):
        self.spec, self.source = spec, None
        # the source's GTID state the target holds before the first transaction (a
        # restore's base, a replay's --start-gtid): with what it applies, its state
        self.start = start
        # False: the target is a live server of its own (a --table restore into it): its
        # binlog GTIDs say nothing of what was applied, and the transactions take new
        # GTIDs of the target's; the checkpoint rows alone keep the apply exactly-once
        self.keep_gtids = keep_gtids
        self.workers = max(1, workers)
        self.merge = max(1, merge)  # source transactions per target commit (no binlog)
        self.cap = BINLOG_CAP       # raw bytes per BINLOG statement (max_allowed_packet)
        self.commits = 0            # target commits made
        self.mariadb = False        # BINLOG from user variables (fragments) works
        self.pending_ddl = None     # Position (start) of a DDL an earlier run was cut off in
        self.sessions = []
        self.applied = MariaGtidPos()
        self.position = None   # Position (end) of the last applied transaction
        self.binlog = False
        self.parallel_applied = 0  # transactions that ran beside another one
        self.most_workers = 1      # the most connections one batch used
        self.kinds = {}            # 'db.table' -> True for a SEQUENCE (what the target says)
        self.reached = MariaGtidPos()  # the source's GTIDs applied, by this run or before
        self.stopped_by_error = False
        self.unlogged_sequence_rows = 0  # transactions whose sequence rows went unlogged

    def open(self, source):
        """Connect, create the checkpoint table (unlogged) and read what is applied."""
        self.source = source
        self.sessions = [connect(self.spec)]
        self.sessions[0].create_tables(logged=not self.keep_gtids)
        self._load_state()
        self.sessions += [connect(self.spec) for _ in range(1, self.workers)]
        for session in self.sessions:
            session.run(f"SET SESSION innodb_lock_wait_timeout={LOCK_WAIT_TIMEOUT}")
            session.after_fde = None if self.mariadb else MYSQL_GTID_AUTOMATIC
        return self

    def _load_state(self):
        """Applied GTIDs and position: the target's binlog and the newest checkpoint row
        (commits are in order, so the newest row's position covers all before it)."""
        run = self.sessions[0].run
        rows = run("SELECT @@log_bin, @@max_allowed_packet, VERSION()")
        self.binlog = bool(int(rows[0][0]))
        self.mariadb = "mariadb" in rows[0][2].lower()
        self.cap = min(self.cap, int(rows[0][1]) // 4)  # base64 takes 4/3; room to spare
        if self.mariadb:
            state = run("SELECT @@gtid_binlog_pos")[0][0] if self.binlog else ""
        else:  # MySQL keeps gtid_executed with or without a binlog (gtid_mode=ON)
            state = run("SELECT @@gtid_executed")[0][0].replace("\n", "")
            self.applied = MysqlGtidSet()
        if state and self.keep_gtids:
            self.applied = parse_gtid_set(state, "mariadb" if self.mariadb else "mysql")
        pending = run("SELECT file, start FROM mysqlbackup_replay.pending_ddl WHERE source = "
                      f"{self._quote(self.source)}")
        self.pending_ddl = Position(pending[0][0], int(pending[0][1])) if pending else None
        for file, pos, gtid in run("SELECT file, pos, gtid FROM mysqlbackup_replay.checkpoint "
                                   f"WHERE source = {self._quote(self.source)}"):
            if self.position is None or self.position <= Position(file, int(pos)):
                self.position = Position(file, int(pos))
            if gtid:
                _union(self.applied, parse_gtid_set(gtid, guess_flavor(gtid)))
                _union(self.reached, parse_gtid_set(gtid, guess_flavor(gtid)))

    def is_applied(self, trx):
        """True when the target already has this transaction."""
        key = trx.gtid_key
        if key and (len(key) == 2) == (self.applied.flavor == "mysql"):
            return self.applied.contains(*key)
        return self.position is not None and trx.end_position <= self.position

    def apply_many(self, transactions, fde_event, checksum, fde):
        """Apply transactions in order, doing as little per transaction as is safe.

        A target without a binlog keeps no GTIDs, so runs of row-only transactions
        share one commit (up to ``merge`` of them), the checkpoint row inside it;
        a target with a binlog gets every transaction under its own GTID, commit
        groups side by side on the workers (``apply_group``)."""
        if self.merge > 1 and not self.binlog and self.mariadb:  # MySQL: gtid_executed
            for unit in self._merge_units(transactions, checksum, fde):
                if len(unit) > 1:
                    self._apply_merged(unit, fde_event, fde, checksum)
                else:
                    self._apply_serially(unit, fde_event, fde, checksum)
            return
        for batch in batches(transactions):
            if len(batch) > 1 and not any(self._sequences_of(trx) for trx in batch):
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
            trx_size = sum(len(e) for e in trx.events)
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
            add_gtid(gtids, trx)
        chunks = binlog_chunks([e for t in unit for e in row_events(t)], fde, self.cap)
        session = self.sessions[0]
        try:
            session.use_fde(fde_event)
            for i, chunk in enumerate(chunks):
                session.binlog(chunk, "BEGIN;\n" if i == 0 else "", self.mariadb)
            checkpoint = checkpoint_sql(self._quote, self.source, unit[-1], gtids, 0)
            session.run(checkpoint + ";\nCOMMIT")
        except pymysql.err.MySQLError as e:
            session.rollback()
            if not _server_refused(e) or not session.conn.open:
                first, last = unit[0], unit[-1]
                raise ApplyError(
                    f"lost the target during one commit of {len(unit)} transactions "
                    f"({first.gtid or ''}..{last.gtid or ''} at "
                    f"{first.file}:{first.start}-{last.end}): {e.args[-1] or e!r}; "
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
        gtids, scripts = self.applied.copy(), []
        for i, trx in enumerate(batch):
            scripts.append(self._script(trx, fde, checksum, gtids, i % n))  # slot i % n: worker
            add_gtid(gtids, trx)
        turn = run_batch(self.sessions[:n], scripts, fde_event, self.mariadb)
        for script in scripts[:turn.next]:
            self._mark(script.trx)
        self.commits += turn.next
        self.parallel_applied += turn.next
        self.most_workers = max(self.most_workers, n)
        if turn.next < len(scripts):
            log.info("parallel batch stopped at %s (%s); applying the rest one by one",
                     scripts[turn.next].trx.gtid, turn.error[1])
            for session in self.sessions[:n]:
                session.rollback()
            self._apply_serially(batch[turn.next:], fde_event, fde, checksum)

    def _apply_serially(self, transactions, fde_event, fde, checksum):
        session = self.sessions[0]
        for whole in transactions:
            sequence_rows, trx = self._sequence_rows(whole, checksum, fde)
            script, sent = self._script(trx, fde, checksum, self.applied, 0), [0]
            self._check_cut_off(trx, script)
            try:
                session.use_fde(fde_event)
                if sequence_rows:
                    self._apply_unlogged(session, sequence_rows, fde)
                self._send_body(session, trx, script, sent)
                session.run(script.commit)
                self.commits += 1
            except pymysql.err.MySQLError as e:
                session.rollback()
                if not self._ran_before(trx, e, session, script):
                    if sent[0] == script.first_raw:  # refused at once: nothing of it ran
                        self._withdraw(session)
                    raise ApplyError(f"the target refused transaction {trx.gtid or ''} "
                                     f"at {trx.file}:{trx.start}: {e.args[-1]}") from None
            self._mark(script.trx)
            if trx.statements:
                self.kinds = {}  # a DDL may have made, renamed or dropped a sequence

    def _sequences_of(self, trx):
        """The SEQUENCE tables ``trx`` writes, on a MariaDB target that logs the source's
        GTIDs (elsewhere none: their rows need no care); the target is asked once per
        table until a statement may have changed what it is."""
        if not (self.mariadb and self.binlog and self.keep_gtids and trx.rows_events):
            return frozenset()
        unknown = [t for t in trx.tables if t not in self.kinds]
        for name in unknown:
            schema, _, table = name.partition(".")
            rows = self.sessions[0].run(
                "SELECT table_type FROM information_schema.tables WHERE table_schema = "
                f"{self._quote(schema)} AND table_name = {self._quote(table)}")
            self.kinds[name] = bool(rows) and rows[0][0] == "SEQUENCE"
        return frozenset(t for t in trx.tables if self.kinds[t])

    def _sequence_rows(self, trx, checksum, fde):
        """(the row events of ``trx`` on SEQUENCE tables, ``trx`` without them); (None,
        ``trx``) when it writes none, or nothing else (a group of sequence rows alone is
        logged whole under its GTID, as the source logged it: the module's docstring
        says why the others are not)."""
        sequences = self._sequences_of(trx)
        if not sequences or sequences.issuperset(trx.tables):
            return None, trx
        return take_tables(trx, sequences, checksum, fde)

    def _apply_unlogged(self, session, events, fde):
        """Apply ``events`` (whole row statements) in a commit of their own, unlogged."""
        session.run("SET SESSION sql_log_bin=0")
        try:
            for chunk in binlog_chunks(events, fde, self.cap):
                session.binlog(chunk, "", self.mariadb)
        finally:
            session.run("SET SESSION sql_log_bin=1")
        self.unlogged_sequence_rows += 1

    def _send_body(self, session, trx, script, sent):
        """Send ``script``'s body; ``sent[0]``: how many packets went. The DDL of a
        MariaDB CREATE ... SELECT that a run cut off after it already made is skipped
        (its rows' part, one commit with the checkpoint row, did not happen)."""
        while sent[0] < len(script.body):
            try:
                session.send(script.body[sent[0]], self.mariadb)
            except pymysql.err.MySQLError as e:
                if not (sent[0] < script.ddl_packets and trx.start_position == self.position
                        and e.args[0] in _again(script.body[script.first_raw])):
                    raise
                log.warning("%s at %s:%s: its DDL was made by an earlier run cut off "
                            "before its rows (%s); applying its rows", trx.gtid or "the "
                            "transaction", trx.file, trx.start, e.args[-1])
                sent[0] = script.ddl_packets
                continue
            sent[0] += 1

    def _check_cut_off(self, trx, script):
        """ApplyError when an earlier run was cut off in ``trx``, a transaction that commits
        by itself, and nothing tells whether it ran: a target without a binlog keeps no
        GTIDs, and it is neither a DDL nor an XA statement (whose second run says so)."""
        if self.pending_ddl != trx.start_position or self.binlog or not self.mariadb:
            return
        if script.first_raw is not None and _again(script.body[script.first_raw]):
            return
        raise ApplyError(
            f"an earlier run was cut off while applying transaction {trx.gtid or ''} at "
            f"{trx.file}:{trx.start}, which commits by itself (non-transactional tables), "
            "and this target (no binlog, no GTIDs) cannot tell whether it ran: compare its "
            "tables with the source's at that transaction, then delete the row of "
            "mysqlbackup_replay.pending_ddl to apply it, or restore into a new server")

    def _ran_before(self, trx, error, session, script):
        """True (and its checkpoint written) when ``trx`` is the DDL (or XA statement) an
        earlier run was cut off in, and the target says it is already there (MariaDB DDL
        is atomic)."""
        if self.pending_ddl != trx.start_position or script.first_raw is None or \
                error.args[0] not in _again(script.body[script.first_raw]):
            return False
        log.warning("%s at %s:%s was cut off in an earlier run and the target already has "
                    "it (%s); recorded as applied", trx.gtid or "the statement",
                    trx.file, trx.start, error.args[-1])
        session.run(RESET_SESSION, script.commit)
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

    def _script(self, trx, fde, checksum, gtids, slot):
        """The TrxScript of ``trx``, its checkpoint row that of worker ``slot``."""
        checkpoint = checkpoint_sql(self._quote, self.source, trx, gtids, slot)
        return script_transaction(trx, fde, checksum, self.cap, checkpoint, self.source,
                                self._quote, self.keep_gtids)

    def _mark(self, trx):
        add_gtid(self.applied, trx)
        add_gtid(self.reached, trx)
        self.position = trx.end_position

    def _quote(self, value):
        return self.sessions[0].conn.escape(value)

    def failed(self):
        """The replay stopped on an error: the target's GTID state is left as it is."""
        self.stopped_by_error = True

    def close(self):
        """Record the GTID state reached (``record_slave_pos``) unless the replay stopped
        on an error, then close every connection."""
        if self.unlogged_sequence_rows:
            log.info("the SEQUENCE rows of %d transactions were applied unlogged, just before "
                     "each (the target's binlog holds the rest of each under its GTID)",
                     self.unlogged_sequence_rows)
        try:
            if self.sessions and not self.stopped_by_error:
                self.record_slave_pos()
        finally:
            for session in self.sessions:
                session.close()
            self.sessions = []

    def record_slave_pos(self):
        """MariaDB, the source's GTIDs kept: set the target's ``gtid_slave_pos`` to the
        source's GTID state reached (the module's docstring says why); a target whose
        replica threads run keeps its own, a warning says what to run."""
        if not (self.mariadb and self.keep_gtids):
            return
        run = self.sessions[0].run
        state = MariaGtidPos.parse(run("SELECT @@GLOBAL.gtid_slave_pos")[0][0] or "")
        before = state.copy()
        for more in (self.start, self.reached):
            _union(state, more or MariaGtidPos())
        if state == before:
            return
        try:
            run(f"SET GLOBAL gtid_slave_pos = '{state}'")
        except pymysql.err.MySQLError as e:
            log.warning("the target's gtid_slave_pos stays %s (%s): its gtid_current_pos is "
                        "not the source's; run SET GLOBAL gtid_slave_pos = '%s' on it",
                        before or "empty", e.args[-1], state)


def _again(packet):
    """The error codes the statement ``packet`` gives when it already ran (see
    ``errors_if_already_applied``; none for a LOAD DATA)."""
    return errors_if_already_applied(packet) if isinstance(packet, (bytes, str)) else set()


def _union(gtids, more):
    """Add every transaction of ``more`` (a set of the same flavor) to ``gtids``."""
    if isinstance(more, MysqlGtidSet) and isinstance(gtids, MysqlGtidSet):
        for sid, intervals in more.sids.items():
            for lo, hi in intervals:
                gtids.add_interval(sid, lo, hi)
    elif isinstance(more, MariaGtidPos) and isinstance(gtids, MariaGtidPos):
        for d, (s, n) in more.domains.items():
            gtids.add(d, s, n)


def _server_refused(error):
    """True for an error the server sent (not a client or connection error, 2000-2999)."""
    code = error.args[0] if error.args and isinstance(error.args[0], int) else 0
    return code >= 1000 and not 2000 <= code < 3000
