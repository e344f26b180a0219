"""``mysqlbackup drill``: restore the archive into a scratch server and prove it.

The scratch server is a server of our own (``mysqlbackup.scratch``): a
throwaway datadir, a free loopback port, binlog on with GTID strict mode. The
restore is ``run_restore`` as ``mysqlbackup restore`` runs it (its lease keeps
retention off what it reads); the drill then checks that the scratch server
logged each transaction the indexes list between the base and the stop point
exactly once (``check``), and that every table answers CHECKSUM TABLE. The RTO is
the restore's wall time.
"""

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field

from mysqlbackup.binlog import events as ev
from mysqlbackup.binlog.gtid import MariaGtidPos
from mysqlbackup.binlog.scan import EventStream
from mysqlbackup.errors import ExitCode, MysqlBackupError, StoreError, UsageError
from mysqlbackup.scratch import ScratchMariaDB
from mysqlbackup.source.spec import SourceSpec
from replay.drill.check import check_applied, expected_of, missing_gtids, on_bookkeeping

SYSTEM_SCHEMAS = ("mysql", "information_schema", "performance_schema", "sys",
                  "mysqlbackup_replay")
SCRATCH_SERVER_ID = 4_000_000_001  # apart from any source's: the GTIDs keep their own
READ_CHUNK = 4 << 20


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
    basedir = tempfile.mkdtemp(prefix="mysqlbackup-drill-", dir=opts.workdir)
    server = ScratchMariaDB(basedir, server_id=SCRATCH_SERVER_ID, semi_sync=False)
    try:
        started = time.monotonic()
        server.start()
        version = server.execute("SELECT VERSION()")[0][0]
        report.lines.append(f"scratch server: mariadbd {version} on 127.0.0.1:{server.port}, "
                            f"datadir {server.datadir} (started in "
                            f"{time.monotonic() - started:.1f}s)")
        refuse_older_scratch(version, planned[0].manifest)
        _restore_and_check(opts, planned, server, report, progress)
    finally:
        server.stop()
        if opts.keep:
            report.lines.append(f"scratch server stopped; its files kept in {basedir}")
        else:
            shutil.rmtree(basedir, ignore_errors=True)
    return report


def _restore_plan(ropts, report):
    """(RestorePlan, ReplayOptions) of the drill's restore, planned from the archive
    alone; None with the problem in ``report`` when none can be. Bad input and an
    archive that cannot be read (UsageError: among them no archive there, no such
    source; StoreError) are no drill result: raised, they exit with their own code. A
    MySQL archive is refused (UsageError): the scratch server is a mariadbd, and the
    check reads MariaDB GTIDs."""
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
    if plan.manifest.get("gtid_flavor") == "mysql":
        raise UsageError(f"drill restores into a scratch mariadbd and cannot drill a MySQL "
                         f"archive yet (base {plan.manifest['id']} is of MySQL "
                         f"{plan.manifest.get('server_version', '')}): restore it into a "
                         "MySQL server of your own (mysqlbackup restore) and compare")
    return plan, replay_opts


def refuse_older_scratch(version, manifest):
    """UsageError when the scratch server (``version``) is of an older MariaDB release
    series than the base's source: a drill proves a restore into the version it runs,
    and an older server may lack what the source wrote (collations, syntax)."""
    source = manifest.get("server_version")
    if not source or ev.parse_version(version)[:2] >= ev.parse_version(source)[:2]:
        return
    wanted = ".".join(str(n) for n in ev.parse_version(source)[:2])
    raise UsageError(f"drill's scratch mariadbd is {version}, older than the source's "
                     f"{source} (base {manifest['id']}): put the mariadbd and "
                     f"mariadb-install-db of MariaDB {wanted} or later first on PATH")


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
    _check_transactions(result["plan"], replay_opts, server, report)
    _check_tables(server, report)
    report.lines.append(f"RTO: {report.rto:.1f}s (plan, load of base {report.base_id}, replay)")


def _check_transactions(plan, replay_opts, server, report):
    expected, gtids = expected_of(plan), logged_gtids(server)
    skipped = skipped_on_purpose(plan, replay_opts, missing_gtids(expected, gtids))
    problems, count, end = check_applied(expected, gtids, skipped)
    report.problems += [f"transactions: {p}" for p in problems]
    if not problems:
        report.lines.append(
            f"transactions: {count} applied, each once, after base {plan.manifest['id']} "
            f"(GTID {plan.manifest.get('gtid') or '(none)'}) through "
            + ", ".join(f"{d}-*-{n}" for d, (_, n) in sorted(end.domains.items()))
            + (" as the indexes list" if expected.exact else
               " (within the file the stop point falls in, as the indexes place it)")
            + (f"; {len(skipped)} left out on purpose (the replay's bookkeeping schema)"
               if skipped else ""))


def skipped_on_purpose(plan, replay_opts, missing):
    """The (domain, seq_no) among ``missing`` that the replay leaves out of the target's
    binlog on purpose: filtered out by its selection, or statements on its bookkeeping
    schema only (an earlier restore into the live source logged them there). Found by
    decoding only the files that hold them, as a replay task does (``job.tasks.decode_unit``)."""
    if not missing:
        return frozenset()
    from replay.job.run import attach_unit
    from replay.job.tasks import decode_unit
    from replay.job.plan import units_to_read
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
            parts = trx.maria_gtid
            if parts and (parts[0], parts[2]) in missing and (
                    replay_opts.selection.decide(trx)[1] in ("filtered out", "excluded")
                    or _bookkeeping_only(trx, checksum, fde)):
                found.add((parts[0], parts[2]))
    return frozenset(found)


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
    of the (domain, seq_no) in ``missing``."""
    before, after = (MariaGtidPos.parse(t or "") for t in (span.gtid_before, span.gtid_after))
    return any(not before.contains(d, 0, n) and after.contains(d, 0, n) for d, n in missing)


def logged_gtids(server):
    """(domain, server_id, seq_no) of every MariaDB GTID event in the server's binlog
    files, in order (read from its datadir in chunks)."""
    found = []
    for name in server.binlog_files():
        stream = None

        def on_event(offset, event):
            if event[4] == ev.MARIA_GTID:
                g = ev.parse_maria_gtid(event, stream.checksum)
                found.append((g.domain, g.server_id, g.seq))
        stream = EventStream(on_event, file=name)
        with open(os.path.join(server.datadir, name), "rb") as f:
            for chunk in iter(lambda: f.read(READ_CHUNK), b""):
                stream.feed(chunk)
        stream.close()
    return found


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
