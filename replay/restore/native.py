"""``--apply native``: the target's own replication applier applies the binlogs.

The target (MariaDB) is made a replica of a primary-side server on loopback
(``replay.serve``, which serves the archived binlogs and stops at the stop point)
through a replication connection of its own, named ``mysqlbackup_restore``:
``gtid_slave_pos`` is set to the base's position, ``CHANGE MASTER ...
MASTER_USE_GTID=slave_pos``, ``START SLAVE ... UNTIL master_gtid_pos = <end>``
(the target cannot apply past the last transaction before the stop point even if
more were sent), parallel apply on for the run (``slave_parallel_threads``, and
the connection's ``slave_parallel_mode=optimistic``). It is done when ``gtid_slave_pos``
covers the end position, which ``expected_end`` computes from the archive's
indexes (and, with a stop point inside a file, from that one file's
transactions). Then ``STOP SLAVE``, ``RESET SLAVE ALL`` and the parallel settings
put back, on errors too.

Exactly-once comes from the target's own ``gtid_slave_pos`` (written in the
transaction it records): a killed run, run again, finds the target ahead of the
base and leaves it there, so every transaction is applied once. The target's
``slave_parallel_threads`` is kept in ``mysqlbackup_replay.native_settings`` while
a run changed it: a killed run's is put back by the next one.

A MySQL target (``MysqlNativeApply``; serve speaks as a MySQL primary): ``CHANGE
REPLICATION SOURCE TO ... SOURCE_AUTO_POSITION=1 FOR CHANNEL 'mysqlbackup_restore'``,
``START REPLICA UNTIL SQL_AFTER_GTIDS = <end>``, ``replica_parallel_workers`` for the
run (kept and put back as above), ``RESET REPLICA ALL FOR CHANNEL`` at the end; its
exactly-once record is its own ``gtid_executed``, which its dump sends serve.
"""

import ipaddress
import logging
import secrets
import socket
import time

import pymysql

from mysqlbackup.archive.stop import END
from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos, MysqlGtidSet, covers
from mysqlbackup.errors import MysqlBackupError, NativeRefused, UsageError
from replay.job.run import RunSummary
from replay.job.sinks.session import connect_target
from replay.restore.nativeend import (applied_count, expected_end, past, serial_reason,
                                      state)

log = logging.getLogger(__name__)

CONNECTION = "mysqlbackup_restore"   # the target's replication connection this tool owns
SERVE_USER = "mysqlbackup_serve"     # the login serve is started with (a new password a run)
PARALLEL_MODE = "optimistic"
SETTINGS_TABLE = "mysqlbackup_replay.native_settings"  # the target's own, during a run
SETTINGS_DDL = (f"CREATE TABLE IF NOT EXISTS {SETTINGS_TABLE} (connection VARCHAR(64) NOT NULL "
                "PRIMARY KEY, threads INT NOT NULL) ENGINE=InnoDB")
NO_SUCH_CONNECTION = 1617           # ER_SLAVE_NOT_FOUND: "There is no master connection"
NO_SUCH_CHANNEL = 3074              # MySQL's ER_REPLICA_CHANNEL_DOES_NOT_EXIST
IDLE_FOR = 10.0                     # seconds a target idle short of the end is a failure
POLL = 0.1                          # seconds between looks at the target
PROGRESS_EVERY = 5.0                # seconds between progress lines


class NativeApplyError(MysqlBackupError):
    """The target's replication stopped on an error (its IO or SQL thread)."""


def preflight(spec, base_gtid, progress=None, source_server_id=None):
    """``NativeApply.check`` of the target ``spec`` before a restore loads anything into
    it (the source's server_id from the base's GTID position, and ``source_server_id``,
    the manifest's: a MySQL GTID does not name it)."""
    target = native_target(spec, progress)
    try:
        target.check(state(base_gtid, target.EMPTY()), source_server_id)
    finally:
        target.close()


def check_resume(conn, source, base_gtid, apply):
    """UsageError when a restore resumed with ``apply`` was begun with the other one:
    each has its own exactly-once record (statements: the checkpoint rows of
    ``source``; native: the target's ``gtid_slave_pos`` past the base's ``base_gtid``),
    and the other one's progress would be applied again."""
    with conn.cursor() as cur:
        cur.execute("SELECT 1 FROM information_schema.tables WHERE table_schema = "
                    "'mysqlbackup_replay' AND table_name = 'checkpoint'")
        statements = bool(cur.fetchall())
        if statements:
            cur.execute("SELECT 1 FROM mysqlbackup_replay.checkpoint WHERE source = %s "
                        "LIMIT 1", (source,))
            statements = bool(cur.fetchall())
        if ":" in (base_gtid or ""):  # MySQL: what the target holds past the base
            cur.execute("SELECT @@GLOBAL.gtid_executed")
            held = MysqlGtidSet.parse(cur.fetchone()[0] or "")
            base = MysqlGtidSet.parse(base_gtid)
        else:
            cur.execute("SELECT @@GLOBAL.gtid_slave_pos")
            held = MariaGtidPos.parse(cur.fetchone()[0] or "")
            base = MariaGtidPos.parse(base_gtid or "") if "-" in (base_gtid or "") else None
    native = base is not None and not covers(base, held)
    begun = "statements" if statements else "native" if native else None
    if begun is not None and begun != apply:
        raise UsageError(f"this restore was begun with --apply {begun} (the target holds its "
                         f"progress): run it again with --apply {begun}")


def native_target(spec, progress=None):
    """The NativeApply of the target ``spec``: MySQL's (``MysqlNativeApply``) or MariaDB's."""
    conn = connect_target(spec)
    with conn.cursor() as cur:
        cur.execute("SELECT VERSION()")
        mariadb = "mariadb" in cur.fetchone()[0].lower()
    return (NativeApply if mariadb else MysqlNativeApply)(spec, progress, conn)


class NativeApply:
    """The target (MariaDB) as a replica of ``address`` for one run (one connection)."""

    PARALLEL_VAR, EMPTY = "slave_parallel_threads", MariaGtidPos
    SERIAL = 0   # the value of PARALLEL_VAR that applies in the binlog's order, alone

    def __init__(self, spec, progress=None, conn=None):
        self.spec, self.progress = spec, progress or (lambda line: None)
        self.conn = conn or connect_target(spec)


    def _rows(self, sql, args=None):
        with self.conn.cursor() as cur:
            cur.execute(sql, args)
            return cur.fetchall()

    def _value(self, sql):
        return self._rows(sql)[0][0]

    def position(self):
        """The target's exactly-once record: its ``gtid_slave_pos`` (MariaGtidPos)."""
        return MariaGtidPos.parse(self._value("SELECT @@GLOBAL.gtid_slave_pos") or "")

    WHAT, NAME = "connection", "Connection_name"   # a replication connection, its column

    def check(self, end, source_server_id=None):
        """Refuse a target this cannot work on: a replication connection that is not
        ours, the source's own server_id (a replica skips such events). A connection of
        ours left by a killed run is removed."""
        self._check_replication({s for s, _ in end.domains.values()} | {source_server_id})

    def _check_replication(self, source_ids):
        names = [row[self.NAME] or "" for row in self.slave_status(all_=True)]
        foreign = [n or "(default)" for n in names if n != CONNECTION]
        if foreign:
            raise UsageError(f"the target {self.spec.address} already replicates ({self.WHAT} "
                             f"{', '.join(foreign)}): --apply native makes it a replica of "
                             "its own; remove that replication first, or use --apply "
                             "statements")
        if CONNECTION in names:
            self.progress(f"native: removing the replication {self.WHAT} {CONNECTION} "
                          "left by an earlier run")
            self._reset()
        server_id = int(self._value("SELECT @@GLOBAL.server_id"))
        if server_id in source_ids:
            raise UsageError(f"the target {self.spec.address} has server_id {server_id}, "
                             "the source's: a replica skips the events of its own server_id; "
                             "start the target with another server_id")

    def slave_status(self, all_=False):
        """SHOW SLAVE STATUS of our connection (a dict, or None), or of all (list)."""
        with self.conn.cursor() as cur:
            try:
                cur.execute("SHOW ALL SLAVES STATUS" if all_ else
                            f"SHOW SLAVE '{CONNECTION}' STATUS")
            except pymysql.err.OperationalError as e:
                if e.args[0] != NO_SUCH_CONNECTION:
                    raise
                return None
            names = [d[0] for d in cur.description]
            rows = [dict(zip(names, row)) for row in cur.fetchall()]
        return rows if all_ else (rows[0] if rows else None)

    def set_start(self, start, fresh):
        """``gtid_slave_pos`` to the base's ``start``, unless the target is at or past
        it already and the base was not loaded by this run (a rerun: resume)."""
        current = self.position()
        if fresh or not covers(current, start):
            self.conn.cursor().execute("SET GLOBAL gtid_slave_pos = %s", (str(start),))
            return start
        if current != start:
            self.progress(f"native: the target is at GTID {current}, past the base's "
                          f"{str(start) or '(none)'}: resuming from there")
        return current

    def parallel(self, threads):
        """Set ``slave_parallel_threads`` (global: every connection's pool). The
        target's own value is kept in a row of SETTINGS_TABLE first (unlogged), so that
        a run killed before it put it back leaves it to the next run's ``finish``. (The
        mode is our connection's own, set in ``start``: it goes with the connection.)"""
        if self._saved_threads() is None:
            saved = int(self._value(f"SELECT @@GLOBAL.{self.PARALLEL_VAR}"))
            self._unlogged("CREATE DATABASE IF NOT EXISTS mysqlbackup_replay", SETTINGS_DDL,
                           (f"INSERT INTO {SETTINGS_TABLE} VALUES (%s, %s)", (CONNECTION, saved)))
        self.conn.cursor().execute(f"SET GLOBAL {self.PARALLEL_VAR} = %s", (threads,))

    def _saved_threads(self):
        """The slave_parallel_threads kept by ``parallel`` and not put back, or None."""
        if not self._rows("SELECT 1 FROM information_schema.tables WHERE table_schema = "
                          "'mysqlbackup_replay' AND table_name = 'native_settings'"):
            return None
        rows = self._rows(f"SELECT threads FROM {SETTINGS_TABLE} WHERE connection = %s",
                          (CONNECTION,))
        return rows[0][0] if rows else None

    def _unlogged(self, *statements):
        with self.conn.cursor() as cur:
            cur.execute("SET SESSION sql_log_bin = 0")
            try:
                for sql in statements:
                    cur.execute(*((sql,) if isinstance(sql, str) else sql))
            finally:
                cur.execute("SET SESSION sql_log_bin = 1")

    def start(self, host, port, user, password, end):
        """CHANGE MASTER (our connection, TLS, its parallel mode) and START SLAVE UNTIL
        ``end``. Over TLS always; a MariaDB 11.4+ target verifies serve's certificate
        (made at its start) by the password (``replay.serve.protocol.certs``), an older one
        cannot without a CA file of its own (loopback, both ends this run's)."""
        verify = int(ev.parse_version(self._value("SELECT VERSION()")) >= (11, 4, 0))
        with self.conn.cursor() as cur:
            cur.execute(f"CHANGE MASTER '{CONNECTION}' TO MASTER_HOST = %s, MASTER_PORT = %s, "
                        "MASTER_USER = %s, MASTER_PASSWORD = %s, MASTER_USE_GTID = slave_pos, "
                        "MASTER_CONNECT_RETRY = 1, MASTER_SSL = 1, "
                        f"MASTER_SSL_VERIFY_SERVER_CERT = {verify}",
                        (host, port, user, password))
            cur.execute(f"SET GLOBAL {CONNECTION}.slave_parallel_mode = %s", (PARALLEL_MODE,))
            cur.execute(f"START SLAVE '{CONNECTION}' UNTIL master_gtid_pos = %s", (str(end),))

    def wait(self, end, timeout=None, ended=None):
        """Until ``gtid_slave_pos`` covers ``end``; NativeApplyError when a thread stops
        on an error (or the SQL thread stops short), after ``timeout`` seconds, or when
        ``ended()`` (the server's EndInfo once it sent its last transaction, else None)
        says there is no more to come and the target has applied everything it got,
        short of ``end``, for IDLE_FOR seconds."""
        started = last_line = time.monotonic()
        idle = Idle()
        while True:
            status = self.slave_status() or {}
            pos = self.position()  # after the status: a thread stopped had applied it
            if covers(pos, end):
                return pos
            _check_threads(status, pos, end)
            now = time.monotonic()
            if ended is not None and idle.seen(status, pos, now):
                info = ended()
                if info is not None:
                    raise NativeApplyError(
                        f"the server sent its last transaction (GTID {info.last_gtid}: "
                        f"{info.reason}) and the target applied all it got, at GTID {pos}, "
                        f"short of the end expected from the archive's indexes, {end}")
            if timeout is not None and now - started > timeout:
                raise NativeApplyError(f"the target did not reach GTID {end} in {timeout:.0f}s "
                                       f"(it is at {pos}; {_state(status)})")
            if now - last_line >= PROGRESS_EVERY:
                self.progress(f"native: target at GTID {pos}, to reach {end} ({_state(status)})")
                last_line = now
            time.sleep(POLL)

    def _reset(self):
        with self.conn.cursor() as cur:
            cur.execute(f"STOP SLAVE '{CONNECTION}'")
            cur.execute(f"RESET SLAVE '{CONNECTION}' ALL")

    def finish(self):
        """STOP SLAVE, RESET SLAVE ALL (our connection), the parallel settings back
        (this run's, or a killed run's)."""
        try:
            if self.slave_status() is not None:
                self._reset()
        finally:
            saved = self._saved_threads()
            if saved is not None:
                self.conn.cursor().execute(f"SET GLOBAL {self.PARALLEL_VAR} = %s", (saved,))
                self._unlogged((f"DELETE FROM {SETTINGS_TABLE} WHERE connection = %s",
                                (CONNECTION,)))

    def close(self):
        self.conn.close()


class MysqlNativeApply(NativeApply):
    """A MySQL target (8.4/9.x) as a replica, on a channel of its own, by
    SOURCE_AUTO_POSITION=1; its ``gtid_executed`` is the exactly-once record. Its
    replica status is read with MariaDB's names (``Slave_IO_Running``, ...)."""

    PARALLEL_VAR, EMPTY = "replica_parallel_workers", MysqlGtidSet
    SERIAL = 1
    WHAT, NAME = "channel", "Channel_Name"

    def position(self):
        return MysqlGtidSet.parse(self._value("SELECT @@GLOBAL.gtid_executed") or "")

    def check(self, end, source_server_id=None):
        """Refuse a target without GTIDs on, with a replication channel that is not ours,
        or with the source's server_id; remove our channel left by a killed run."""
        if self._value("SELECT @@GLOBAL.gtid_mode") != "ON":
            raise UsageError(f"--apply native needs gtid_mode=ON on the target "
                             f"{self.spec.address} (SOURCE_AUTO_POSITION=1): use --apply "
                             "statements")
        self._check_replication({source_server_id})

    def slave_status(self, all_=False):
        with self.conn.cursor() as cur:
            try:
                cur.execute("SHOW REPLICA STATUS" if all_ else
                            f"SHOW REPLICA STATUS FOR CHANNEL '{CONNECTION}'")
            except pymysql.err.OperationalError as e:
                if e.args[0] != NO_SUCH_CHANNEL:
                    raise
                return None
            names = [_maria_words(d[0]) for d in cur.description]
            rows = [{k: _maria_words(v) if k.endswith("_State") and v else v
                     for k, v in zip(names, row)} for row in cur.fetchall()]
        return rows if all_ else (rows[0] if rows else None)

    def set_start(self, start, fresh):
        """Nothing to set: the target's gtid_executed (the base's after its load, or a
        killed run's further on) is what the replica asks serve for."""
        current = self.position()
        if covers(current, start) and current != start:
            self.progress(f"native: the target is at GTIDs {current}, past the base's "
                          f"{start}: resuming from there")
        return current

    def start(self, host, port, user, password, end):
        """CHANGE REPLICATION SOURCE (our channel, auto-position) and START REPLICA UNTIL
        SQL_AFTER_GTIDS = ``end``."""
        with self.conn.cursor() as cur:
            cur.execute("CHANGE REPLICATION SOURCE TO SOURCE_HOST = %s, SOURCE_PORT = %s, "
                        "SOURCE_USER = %s, SOURCE_PASSWORD = %s, SOURCE_AUTO_POSITION = 1, "
                        "SOURCE_CONNECT_RETRY = 1, SOURCE_SSL = 1, GET_SOURCE_PUBLIC_KEY = 1 "
                        f"FOR CHANNEL '{CONNECTION}'", (host, port, user, password))
            cur.execute(f"START REPLICA UNTIL SQL_AFTER_GTIDS = %s FOR CHANNEL '{CONNECTION}'",
                        (str(end),))

    def _reset(self):
        with self.conn.cursor() as cur:
            cur.execute(f"STOP REPLICA FOR CHANNEL '{CONNECTION}'")
            cur.execute(f"RESET REPLICA ALL FOR CHANNEL '{CONNECTION}'")


def _maria_words(text):
    """A MySQL replica status column's name or thread state in MariaDB's words
    (Replica -> Slave, source -> master: what ``Idle`` and the checks read)."""
    return text.replace("Replica", "Slave").replace("Source", "Master").replace(
        "source", "master")


class Idle:
    """The target found idle (its IO thread waiting for events, its SQL thread having
    applied all it got, neither moving) for IDLE_FOR seconds in a row."""

    def __init__(self):
        self.since, self.at = None, None

    def seen(self, status, pos, now):
        """True when idle with nothing changed since IDLE_FOR seconds before ``now``."""
        idle = (status.get("Slave_IO_State") == "Waiting for master to send event"
                and (status.get("Slave_SQL_Running_State") or "").startswith(
                    "Slave has read all relay log"))
        at = (pos, status.get("Master_Log_File"), status.get("Read_Master_Log_Pos"))
        if not idle:
            self.since = None
            return False
        if self.since is None or at != self.at:
            self.since, self.at = now, at
            return False
        return now - self.since >= IDLE_FOR


def _check_threads(status, pos, end):
    for thread in ("SQL", "IO"):
        errno = status.get(f"Last_{thread}_Errno") or 0
        if errno:
            raise NativeApplyError(f"the target's replication {thread} thread failed at GTID "
                                   f"{pos} (to reach {end}): error {errno}: "
                                   f"{status.get(f'Last_{thread}_Error')}")
    if status.get("Slave_SQL_Running") != "Yes":
        raise NativeApplyError(f"the target's replication SQL thread stopped at GTID {pos} "
                               f"short of {end} ({_state(status)})")


def _state(status):
    return (f"IO thread {status.get('Slave_IO_Running')}: {status.get('Slave_IO_State') or '-'}"
            f"; SQL thread {status.get('Slave_SQL_Running')}: "
            f"{status.get('Slave_SQL_Running_State') or '-'}")


def apply_native(spec, address, user, password, start, end, fresh=True, threads=4,
                 progress=None, timeout=None, ended=None, source_server_id=None):
    """Make the target ``spec`` apply, through its replication applier fed from
    ``address`` (host, port; ``user``/``password`` its login), everything from the
    GTID position ``start`` (the base's) to the End ``end``; returns its RunSummary
    ``run.report_lines`` reads. ``fresh``: the base was loaded by this run (else a
    target ahead of ``start`` resumes from where it is); ``ended``: see
    ``NativeApply.wait``; ``source_server_id``: the source's (a MySQL target must differ)."""
    progress = progress or (lambda line: None)
    target = native_target(spec, progress)
    try:
        target.check(end.gtid_pos, source_server_id)
        before = target.set_start(start, fresh)
        if covers(before, end.gtid_pos):
            target.finish()  # a killed run's settings
            if past(before, end.gtid_pos):
                raise UsageError(f"the target is at GTID {before}, past the stop point (the "
                                 f"end is {end.gtid_pos}): a restore cannot go back; restore "
                                 "into a new server")
            progress(f"native: the target is already at GTID {before}: nothing to apply")
            return _summary(end, before, before)
        try:
            threads = max(threads, target.SERIAL)
            target.parallel(threads)
            target.start(*address, user, password, end.gtid_pos)
            how = f"{threads} parallel threads" if threads > 1 else "one thread"
            progress(f"native: the target replicates from {address[0]}:{address[1]} "
                     f"({how}) from GTID {str(before) or '(none)'} to {end.gtid_pos}")
            after = target.wait(end.gtid_pos, timeout, ended)
        finally:
            target.finish()
        return _summary(end, before, after)
    finally:
        target.close()


def _summary(end, before, after):
    return RunSummary(applied=applied_count(before, after), stop_reason=end.stop_reason,
                      last_gtid=end.last_gtid, last_commit=end.last_commit,
                      gtid_pos=str(after), apply="native")


def check_local(spec):
    """UsageError unless the target ``spec`` is on this machine: serve listens on
    loopback, and the target connects to it there."""
    try:
        loopback = ipaddress.ip_address(socket.gethostbyname(spec.host)).is_loopback
    except (OSError, ValueError):
        loopback = False
    if not loopback:
        raise NativeRefused(f"--apply native needs the target on this machine (it "
                            f"replicates from serve on loopback); {spec.address} is not",
                            ": use --apply statements")


def check_selection(selection):
    """UsageError for what the target's applier cannot do: it applies whole binlogs
    from a GTID position (no filters or start position; an excluded transaction is
    served empty, its GTID kept)."""
    refused = [name for name, given in (
        ("--database", selection.databases), ("--table", selection.tables),
        ("--rewrite-db", selection.rewrite),
        ("--start-position", selection.start_position)) if given]
    if refused:
        raise NativeRefused(f"--apply native applies whole binlogs from a GTID position: "
                            f"not with {', '.join(refused)}", " (use --apply statements)")


def run_native(replay_opts, spec, threads=4, fresh=False, progress=None, timeout=None):
    """Apply what the replay ``replay_opts`` selects (from its start GTIDs to its stop
    point) to the target ``spec`` through its replication applier, fed by
    ``replay.serve`` started on loopback for the run; returns its RunSummary."""
    from replay.planning.plan import units_to_read
    selection = replay_opts.selection
    check_selection(selection)
    check_local(spec)
    source, units, cut = units_to_read(replay_opts)
    start = start_of(selection, units)
    serial = serial_reason([u.index.get("statements") for u in units],
                           units[0].index.get("gtid_before") if units else None,
                           units[-1].index.get("gtid_after") if units else None)
    if serial and threads > 1:
        progress = progress or (lambda line: None)
        progress(f"native: one thread, not {threads}: {serial}")
        threads = 0
    end = expected_end(units, selection, start, replay_opts.archive_url,
                       replay_opts.archive_options, replay_opts.keyring)
    password = secrets.token_urlsafe(24)
    with _serve(replay_opts, source, password) as handle:
        summary = apply_native(spec, (handle.host, handle.port), SERVE_USER, password, start,
                               end, fresh, threads, progress, timeout, lambda: handle.wait_end(0),
                               units[-1].index.get("server_id") if units else None)
    if cut and summary.stop_reason == END.reason:  # later files left out
        summary.stop_reason = selection.stop.reason
    summary.source, summary.files = source, len(units)
    return summary


def start_of(selection, units):
    """The GTID position a native apply starts from: ``--start-gtid`` (a restore: the
    base's), else the state before the archive's first file, as its index says (a
    replay of the whole archive into a server that holds what came before it)."""
    if selection.start_gtids is not None:
        return selection.start_gtids
    before = units[0].index.get("gtid_before") if units else ""
    if before is None:
        raise UsageError(f"--apply native starts from a GTID position, and the index of "
                         f"{units[0].where} does not say the one before it: give "
                         "--start-gtid")
    last = next((u.index["last_gtid"] for u in units if u.index.get("last_gtid")), "")
    return state(before, MysqlGtidSet() if ":" in (before + last) else MariaGtidPos())


def _serve(replay_opts, source, password):
    """replay.serve started on loopback for this run (a context manager): the archive,
    its stop point and exclusions."""
    from replay.serve.server import ServeOptions, start_server
    return start_server(ServeOptions(
        replay_opts.archive_url, source_name=source, listen=("127.0.0.1", 0), user=SERVE_USER,
        password=password, selection=replay_opts.selection, keyring=replay_opts.keyring,
        storage_options=dict(replay_opts.archive_options)))
