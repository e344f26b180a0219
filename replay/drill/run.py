"""``mysqlbackup drill``: restore the archive into a scratch server and prove it.

The scratch server is a server of our own (``mysqlbackup.scratch``): a
throwaway datadir, a free loopback port, binlog on: the first mariadbd on PATH with
GTID strict mode for a MariaDB source (``ScratchMariaDB``), MySQL's own mysqld for a
MySQL source (``ScratchMySQL``), GTID mode as the source ran. The restore is
``run_restore`` as ``mysqlbackup restore`` runs it (its lease keeps retention off what
it reads); the drill then checks that the scratch server logged each transaction the
indexes list between the base and the stop point exactly once (``check``: by GTID,
or by count for a source that keeps no GTIDs), and that every table answers CHECKSUM
TABLE. The RTO is the restore's wall time.
"""

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos, MysqlGtidSet
from mysqlbackup.binlog.scan import EventStream
from mysqlbackup.errors import ExitCode, MysqlBackupError, StoreError, UsageError
from mysqlbackup.scratch import ScratchMariaDB, ScratchMySQL
from mysqlbackup.source.spec import SourceSpec
from replay.drill.check import (check_applied, check_counted, check_mysql_applied,
                                counted_bounds, expected_of, missing_gtids,
                                mysql_expected_of, on_bookkeeping)

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys",
                  "mysqlbackup_replay")
SCRATCH_SERVER_ID = 4_000_000_001  # apart from any source's: the GTIDs keep their own
READ_CHUNK = 4 << 20
MISSING_LOOKED_AT = 10_000  # missing MySQL GTIDs looked for among those left out on purpose


class DrillFailed(MysqlBackupError):
    """The drill's restore or one of its checks failed."""

    exit_code = ExitCode.FAILED


@dataclass
class DrillOptions:
    """What ``mysqlbackup drill`` was asked to do; ``restore`` is a RestoreOptions
    (archive, source, stop) whose target the drill fills in."""

    restore: object
    workdir: str = None      # where the scratch server's directory goes (default: $TMPDIR)
    keep: bool = False       # keep the scratch server's directory (stopped) afterwards
    spark: object = None     # a SparkContext to reuse (tests); default: the restore's own


@dataclass
class DrillReport:
    """What the drill found: problems (empty: passed), lines to print, the RTO."""

    lines: list = field(default_factory=list)
    problems: list = field(default_factory=list)
    rto: float = None
    base_id: str = None


def run_drill(opts, progress=None):
    """Run the drill; returns a DrillReport (``problems`` empty when it passed)."""
    progress = progress or (lambda line: None)
    report = DrillReport()
    planned = _restore_plan(opts.restore, report)  # before any scratch server: bad input costs none
    if planned is None:
        return report
    manifest = planned[0].manifest
    make_server = scratch_maker(manifest)  # its binary found before any folder is made
    basedir = tempfile.mkdtemp(prefix="mysqlbackup-drill-", dir=opts.workdir)
    server = make_server(basedir)
    try:
        started = time.monotonic()
        server.start()
        version = server.execute("SELECT VERSION()")[0][0]
        report.lines.append(f"scratch server: {server.daemon} {version} on 127.0.0.1:"
                            f"{server.port}, datadir {server.datadir} (started in "
                            f"{time.monotonic() - started:.1f}s)")
        refuse_older_scratch(version, manifest, server.daemon)
        _restore_and_check(opts, planned, server, report, progress)
    finally:
        server.stop()
        if opts.keep:
            report.lines.append(f"scratch server stopped; its files kept in {basedir}")
        else:
            shutil.rmtree(basedir, ignore_errors=True)
    return report


def scratch_maker(manifest):
    """A callable (basedir -> scratch server, not started) for the base's source: a
    MariaDB server of the first mariadbd on PATH, or for a MySQL source MySQL's own
    mysqld (ToolError in one line when PATH has none), its GTID mode as the source's
    (a base without a GTID set: a source that keeps none)."""
    if manifest.get("gtid_flavor") != "mysql":
        return lambda basedir: ScratchMariaDB(basedir, server_id=SCRATCH_SERVER_ID,
                                              semi_sync=False)
    from mysqlbackup.base.clone import mysqld_binary
    binary = mysqld_binary("drill restores a MySQL archive into a scratch server of MySQL's "
                           "own mysqld (on PATH, with MySQL's mysql client)")
    gtids = manifest.get("gtid") is not None
    return lambda basedir: ScratchMySQL(binary, basedir, SCRATCH_SERVER_ID, gtids)


def _restore_plan(ropts, report):
    """(RestorePlan, ReplayOptions) of the drill's restore, planned from the archive
    alone; None with the problem in ``report`` when none can be. Bad input and an
    archive that cannot be read (UsageError: among them no archive there, no such
    source; StoreError) are no drill result: raised, they exit with their own code."""
    from mysqlbackup.archive.store import ArchiveStore
    from replay.restore.run import plan_restore
    try:
        plan, replay_opts = plan_restore(ArchiveStore(ropts.archive_url, ropts.archive_options),
                                         ropts)
    except (UsageError, StoreError):
        raise
    except MysqlBackupError as e:
        report.problems.append(f"no restore can be planned: {e}")
        return None
    return plan, replay_opts


def refuse_older_scratch(version, manifest, daemon="mariadbd"):
    """UsageError when the scratch server (``daemon`` of ``version``) is of an older
    release series than the base's source: a drill proves a restore into the version it
    runs, and an older server may lack what the source wrote (collations, syntax)."""
    source = manifest.get("server_version")
    if not source or ev.parse_version(version)[:2] >= ev.parse_version(source)[:2]:
        return
    wanted = ".".join(str(n) for n in ev.parse_version(source)[:2])
    tools = ("mysqld of MySQL" if daemon == "mysqld" else
             "mariadbd and mariadb-install-db of MariaDB")
    raise UsageError(f"drill's scratch {daemon} is {version}, older than the source's "
                     f"{source} (base {manifest['id']}): put the {tools} {wanted} or later "
                     "first on PATH")


def _restore_and_check(opts, planned, server, report, progress):
    from dataclasses import replace

    from replay.restore.run import run_restore
    ropts = replace(opts.restore, target=SourceSpec("127.0.0.1", server.port, "root", ""))
    plan, replay_opts = planned
    report.base_id = plan.manifest["id"]
    started = time.monotonic()
    try:
        result = run_restore(ropts, echo=report.lines.append, progress=progress,
                             spark=opts.spark)
    except MysqlBackupError as e:
        report.problems.append(f"the restore from base {report.base_id} failed: {e}")
        return
    report.rto = time.monotonic() - started
    if plan.manifest.get("gtid_flavor") == "mysql":
        _check_mysql(result, replay_opts, server, report)
    else:
        _check_transactions(result["plan"], replay_opts, server, report)
    _check_tables(server, report)
    report.lines.append(f"RTO: {report.rto:.1f}s (plan, load of base {report.base_id}, replay)")


def _check_transactions(plan, replay_opts, server, report):
    expected, gtids = expected_of(plan), logged_gtids(server)
    skipped = skipped_on_purpose(plan, replay_opts, missing_gtids(expected, gtids))
    problems, count, end = check_applied(expected, gtids, skipped)
    report.problems += [f"transactions: {p}" for p in problems]
    if not problems:
        through = ", ".join(f"{d}-*-{n}" for d, (_, n) in sorted(end.domains.items()))
        report.lines.append(_applied_line(plan, count, through, expected.exact, skipped))


def _check_counted(plan, summary, logged, report):
    """A source that keeps no GTIDs: the transactions the scratch server logged counted
    against the replay's and the indexes' counts."""
    problems = check_counted(counted_bounds(plan), logged, summary.applied,
                             summary.skipped)
    report.problems += [f"transactions: {p}" for p in problems]
    if not problems:
        m = plan.manifest
        report.lines.append(f"transactions: {logged} applied, each once, after base {m['id']} "
                            f"({m['binlog_file']}:{m['binlog_pos']}; the source keeps no "
                            "GTIDs: counted against the indexes)")


def _applied_line(plan, count, through, exact, skipped):
    """The drill's line of the transactions it found applied, each once."""
    return (f"transactions: {count} applied, each once, after base {plan.manifest['id']} "
            f"(GTID {plan.manifest.get('gtid') or '(none)'}) through {through}"
            + (" as the indexes list" if exact else
               " (within the file the stop point falls in, as the indexes place it)")
            + (f"; {len(skipped)} left out on purpose (the replay's bookkeeping schema)"
               if skipped else ""))


def _check_mysql(result, replay_opts, server, report):
    """The MySQL scratch server's binlog against the indexes: by GTID set, or by count
    for a source that keeps no GTIDs."""
    plan = result["plan"]
    gtids, anonymous = mysql_logged(server)
    if plan.manifest.get("gtid") is None:
        return _check_counted(plan, result["summary"], anonymous, report)
    expected = mysql_expected_of(plan)
    problems, count, end = check_mysql_applied(expected, gtids)
    skipped = frozenset()
    if problems:  # what the replay left out on purpose is not missing
        skipped = skipped_on_purpose(plan, replay_opts, _members(expected.low.subtract(end)))
        problems, count, end = check_mysql_applied(expected, gtids, skipped)
    report.problems += [f"transactions: {p}" for p in problems]
    if not problems:
        report.lines.append(_applied_line(plan, count, end, expected.exact, skipped))


def _members(gtid_set, limit=MISSING_LOOKED_AT):
    """The (sid, gno) of a MysqlGtidSet, at most ``limit`` of them."""
    out = set()
    for sid, intervals in gtid_set.sids.items():
        for lo, hi in intervals:
            out.update((sid, gno) for gno in range(lo, min(hi, lo + limit - len(out))))
            if len(out) >= limit:
                return out
    return out


def skipped_on_purpose(plan, replay_opts, missing):
    """The (domain, seq_no) (MySQL: (uuid, gno)) among ``missing`` that the replay leaves
    out of the target's binlog on purpose: filtered out by its selection, or statements
    on its bookkeeping schema only (an earlier restore into the live source logged them
    there). Found by decoding only the files that hold them, as a replay task does
    (``job.tasks.decode_unit``)."""
    if not missing:
        return frozenset()
    from replay.job.run import attach_unit
    from replay.job.tasks import decode_unit
    from replay.planning.plan import units_to_read
    keys = {s.key for s in plan.choice.spans if _holds_any(s, missing)}
    _, units, _ = units_to_read(replay_opts)
    found, args = set(), (replay_opts.archive_url, replay_opts.archive_options,
                          replay_opts.keyring)
    for unit in (u for u in units if (u.epoch, u.name) in keys):
        result = decode_unit(unit, *args)
        if result.error:
            continue  # the restore read it whole; the gap stays a problem
        result = attach_unit(result, unit, *args)
        fde = ev.parse_format_description(result.fde)
        checksum = fde.checksum_alg == ev.CHECKSUM_CRC32
        for trx in result.transactions:
            key = _short_key(trx)
            if key in missing and (
                    replay_opts.selection.decide(trx)[1] in ("filtered out", "excluded")
                    or _bookkeeping_only(trx, checksum, fde)):
                found.add(key)
    return frozenset(found)


def _short_key(trx):
    """(domain, seq_no) of a MariaDB GTID, (uuid, gno) of a MySQL one, else None."""
    parts = trx.maria_gtid
    if parts:
        return parts[0], parts[2]
    key = trx.gtid_key
    return key if key and len(key) == 2 else None


def _bookkeeping_only(trx, checksum, fde):
    """True when every statement of ``trx`` is on the replay's bookkeeping schema (a
    CREATE TABLE IF NOT EXISTS of an earlier restore into the live source: the target
    has the table already and logs nothing for it)."""
    queries = [ev.parse_query(e, checksum, fde) for e in trx.events if e[4] == ev.QUERY]
    statements = [q for q in queries if q.sql.strip().upper() not in ("BEGIN", "COMMIT")]
    return bool(statements) and all(on_bookkeeping(q.db, q.sql) for q in statements) and all(
        on_bookkeeping(t.split(".", 1)[0], "") for t in trx.tables)


def _holds_any(span, missing):
    """True when the file's GTID range (after gtid_before, through gtid_after) holds one
    of the (domain, seq_no) (MySQL: (uuid, gno)) in ``missing``."""
    mysql = any(isinstance(k, str) for k, _ in missing)
    parse = MysqlGtidSet.parse if mysql else MariaGtidPos.parse
    before, after = (parse(t or "") for t in (span.gtid_before, span.gtid_after))
    if mysql:
        return any(not before.contains(s, n) and after.contains(s, n) for s, n in missing)
    return any(not before.contains(d, 0, n) and after.contains(d, 0, n) for d, n in missing)


def mysql_logged(server):
    """((uuid[:tag], gno) of every MySQL GTID event in the server's binlog files in
    order, the number of anonymous transactions), read from its datadir in chunks."""
    found, anonymous = [], [0]

    def on_event(event, checksum):
        if event[4] == ev.ANONYMOUS_GTID:
            anonymous[0] += 1
        elif event[4] == ev.GTID:
            found.append(ev.parse_mysql_gtid(event, checksum))
        elif event[4] == ev.GTID_TAGGED:
            found.append(ev.parse_mysql_gtid_tagged(event, checksum))
    _walk_binlogs(server, on_event)
    return found, anonymous[0]


def logged_gtids(server):
    """(domain, server_id, seq_no) of every MariaDB GTID event in the server's binlog
    files, in order (read from its datadir in chunks)."""
    found = []

    def on_event(event, checksum):
        if event[4] == ev.MARIA_GTID:
            g = ev.parse_maria_gtid(event, checksum)
            found.append((g.domain, g.server_id, g.seq))
    _walk_binlogs(server, on_event)
    return found


def _walk_binlogs(server, on_event):
    """``on_event(event, checksum)`` for every event of the server's binlog files, in
    order (read from its datadir a chunk at a time)."""
    for name in server.binlog_files():
        stream = None

        def each(offset, event):
            on_event(event, stream.checksum)
        stream = EventStream(each, file=name)
        with open(os.path.join(server.datadir, name), "rb") as f:
            for chunk in iter(lambda: f.read(READ_CHUNK), b""):
                stream.feed(chunk)
        stream.close()


def user_tables(server):
    """`schema`.`table` of every base table outside the system schemas."""
    marks = ", ".join(["%s"] * len(SYSTEM_SCHEMAS))
    conn = server.root()
    try:
        with conn.cursor() as cur:
            cur.execute("SELECT table_schema, table_name FROM information_schema.tables WHERE "
                        f"table_type = 'BASE TABLE' AND table_schema NOT IN ({marks}) "
                        "ORDER BY 1, 2", SYSTEM_SCHEMAS)
            return [f"`{s}`.`{t}`" for s, t in cur.fetchall()]
    finally:
        conn.close()


def _check_tables(server, report):
    """CHECKSUM TABLE on every user table: each must answer with a checksum."""
    import pymysql
    tables, bad = user_tables(server), []
    conn = server.root()
    try:
        with conn.cursor() as cur:
            for table in tables:
                try:
                    cur.execute(f"CHECKSUM TABLE {table}")
                    row = cur.fetchone()
                    if row is None or row[1] is None:
                        bad.append(f"{table}: no checksum")
                except pymysql.MySQLError as e:
                    bad.append(f"{table}: {e.args[-1]}")
    finally:
        conn.close()
    report.problems += [f"table not readable: {b}" for b in bad]
    if not bad:
        report.lines.append(f"tables: {len(tables)} readable (CHECKSUM TABLE on each)")
