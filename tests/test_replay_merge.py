"""A target without a binlog: runs of row-only transactions share one commit, with the
checkpoint row inside it; the result, the resume point and the errors stay exact."""

import pytest

from mysqlbackup.stream.archiver import Archiver
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.sandbox import MariaDBSandbox
from mysqlbackup.source.spec import SourceSpec
from replay.planning.plan import ReplayOptions
from replay.job.run import run_replay
from replay.planning.options import build_selection
from replay.job.sinks.target import ApplyError, TargetApplier
from tests.helpers import backup_dir

SCHEMA = ["CREATE DATABASE m",
          "CREATE TABLE m.t (id INT PRIMARY KEY, v VARCHAR(400)) ENGINE=InnoDB",
          "CREATE TABLE m.log (id INT PRIMARY KEY, note VARCHAR(40)) ENGINE=MyISAM"]
TABLES = ["m.t", "m.log"]


@pytest.fixture(scope="module")
def merged_source(tmp_path_factory):
    """An archive of single-row transactions, a DDL, a MyISAM write and a multi-row
    transaction; the GTID of the insert of id 12 (for the conflict test)."""
    tmp = tmp_path_factory.mktemp("merge")
    source = MariaDBSandbox(str(tmp / "source"), semi_sync=False).start()
    try:
        yield archived_workload(source, tmp)
    finally:
        source.stop(remove=True)


def archived_workload(source, tmp):
    source.execute(*SCHEMA)
    start = source.execute("SELECT @@gtid_binlog_pos")[0][0]
    insert_12 = None
    for i in range(30):
        source.execute(f"INSERT INTO m.t VALUES ({i}, REPEAT('x', 300))")
        if i == 12:
            insert_12 = source.execute("SELECT @@gtid_binlog_pos")[0][0]
    source.execute("ALTER TABLE m.t ADD COLUMN n INT NOT NULL DEFAULT 7",
                   "INSERT INTO m.log VALUES (1, 'not transactional')")
    transaction(source, "UPDATE m.t SET v = CONCAT(v, 'y'), n = id WHERE id < 10",
                "DELETE FROM m.t WHERE id = 5")
    for i in range(30, 60):
        source.execute(f"INSERT INTO m.t (id, v) VALUES ({i}, REPEAT('z', 300))")
    transaction(source, *["INSERT INTO m.t (id, v) VALUES " + ", ".join(  # 4 x ~30 KB
        f"({1000 + s * 100 + r}, REPEAT('b', 390))" for r in range(75)) for s in range(4)])
    source.execute("FLUSH BINARY LOGS")
    local = backup_dir([source.binlog_path(n) for n in source.binlog_files()], tmp / "local",
                       "merge1")
    url = f"file://{tmp / 'archive'}"
    Archiver(str(local), ArchiveStore(url)).run_once()
    state = {t: source.execute(f"CHECKSUM TABLE {t}")[0][1] for t in TABLES}
    return {"url": url, "start": start, "insert_12": insert_12, "checksums": state,
            "create": source.execute("SHOW CREATE TABLE m.t")}


def transaction(server, *statements):
    """Run ``statements`` as one transaction."""
    conn = server.root(autocommit=False)
    with conn.cursor() as cur:
        for sql in statements:
            cur.execute(sql)
    conn.commit()
    conn.close()


def new_target(make_server, server_id, extra_args=()):
    target = make_server(server_id=server_id, semi_sync=False, log_bin=False,
                         extra_args=list(extra_args))
    target.execute(*SCHEMA)
    return target, SourceSpec("127.0.0.1", target.port, "root", "")


def test_row_transactions_share_commits_and_apply_exactly_once(merged_source, make_server,
                                                               spark):
    target, spec = new_target(make_server, 8)
    opts = ReplayOptions(merged_source["url"], {},
                         selection=build_selection(start_gtid=merged_source["start"]))
    applier = TargetApplier(spec, merge=8)
    applier.cap = 1500  # several BINLOG statements in one merged commit
    summary = run_replay(opts, applier, spark=spark)
    assert summary.applied == 30 + 2 + 1 + 30 + 1
    # 60 single-row inserts, the UPDATE/DELETE and the big one in merged commits of 8 at
    # most; the DDL and the MyISAM write (committed by a COMMIT, not an XID) alone
    assert 2 + 62 / 8 <= summary.target_commits <= 2 + 62 / 8 + 3
    assert {t: target.execute(f"CHECKSUM TABLE {t}")[0][1] for t in TABLES} == \
        merged_source["checksums"]
    assert target.execute("SHOW CREATE TABLE m.t") == merged_source["create"]
    again = run_replay(opts, TargetApplier(spec, merge=8), spark=spark)
    assert again.applied == 0 and again.target_commits == 0


def test_a_refused_merged_commit_is_redone_one_by_one_naming_the_transaction(
        merged_source, make_server, spark):
    target, spec = new_target(make_server, 9)
    target.execute("INSERT INTO m.t VALUES (12, 'already here')")
    opts = ReplayOptions(merged_source["url"], {},
                         selection=build_selection(start_gtid=merged_source["start"]))
    with pytest.raises(ApplyError, match=f"transaction {merged_source['insert_12']} at"):
        run_replay(opts, TargetApplier(spec, merge=8), spark=spark)
    # everything before the refused transaction is applied and checkpointed, nothing after
    assert target.execute("SELECT COUNT(*) FROM m.t WHERE id < 12")[0][0] == 12
    assert target.execute("SELECT COUNT(*) FROM m.t WHERE id > 12")[0][0] == 0
    gtid = target.execute("SELECT gtid FROM mysqlbackup_replay.checkpoint")[0][0]
    seq = int(merged_source["insert_12"].split("-")[-1])
    assert gtid.endswith(f"-{seq - 1}")


def test_a_connection_lost_in_a_merged_commit_stops_and_the_rerun_resumes(
        merged_source, make_server, spark, monkeypatch):
    from replay.job.sinks.session import FRAGMENT_BINLOG, TargetSession
    target, spec = new_target(make_server, 15)
    opts = ReplayOptions(merged_source["url"], {},
                         selection=build_selection(start_gtid=merged_source["start"]))
    real_run, seen = TargetSession.run, []

    def killed_at_the_second_merged_commit(self, *statements):
        if any(FRAGMENT_BINLOG in str(s) and "BEGIN" in str(s) for s in statements):
            seen.append(1)
            if len(seen) == 2:  # the server drops this connection as the BINLOG arrives
                target.execute(f"KILL {self.conn.thread_id()}")
        return real_run(self, *statements)
    monkeypatch.setattr(TargetSession, "run", killed_at_the_second_merged_commit)
    with pytest.raises(ApplyError, match=r"lost the target during one commit of 8 "
                                         r"transactions .* run the replay again"):
        run_replay(opts, TargetApplier(spec, merge=8), spark=spark)
    monkeypatch.setattr(TargetSession, "run", real_run)
    assert target.execute("SELECT COUNT(*) FROM m.t")[0][0] == 8  # the first commit only
    summary = run_replay(opts, TargetApplier(spec, merge=8), spark=spark)
    assert summary.applied == 64 - 8
    assert {t: target.execute(f"CHECKSUM TABLE {t}")[0][1] for t in TABLES} == \
        merged_source["checksums"]


@pytest.mark.parametrize("merge", [1, 8], ids=["commit-each", "merged"])
def test_binlog_statements_stay_under_a_small_max_allowed_packet(merged_source, make_server,
                                                                 spark, merge):
    # 64 KiB: the big transaction (~120 KB, ~160 KB as base64) cannot go in one statement
    target, spec = new_target(make_server, 11 + merge, ["--max-allowed-packet=65536"])
    opts = ReplayOptions(merged_source["url"], {},
                         selection=build_selection(start_gtid=merged_source["start"]))
    summary = run_replay(opts, TargetApplier(spec, merge=merge), spark=spark)
    assert summary.applied == 64
    assert {t: target.execute(f"CHECKSUM TABLE {t}")[0][1] for t in TABLES} == \
        merged_source["checksums"]


class Cut(Exception):
    """Stands for a replay killed at one precise point."""


def test_a_ddl_cut_off_before_its_checkpoint_counts_as_applied_on_the_rerun(
        merged_source, make_server, spark, monkeypatch):
    from replay.job.sinks.session import TargetSession
    target, spec = new_target(make_server, 10)
    opts = ReplayOptions(merged_source["url"], {},
                         selection=build_selection(start_gtid=merged_source["start"]))
    real_run = TargetSession.run

    def run_until_the_ddl_checkpoint(self, *statements):
        if any("DELETE FROM mysqlbackup_replay.pending_ddl" in str(s) for s in statements):
            raise Cut()
        return real_run(self, *statements)
    monkeypatch.setattr(TargetSession, "run", run_until_the_ddl_checkpoint)
    with pytest.raises(Cut):
        run_replay(opts, TargetApplier(spec, merge=8), spark=spark)
    monkeypatch.setattr(TargetSession, "run", real_run)
    # the ALTER ran, its checkpoint did not: only the announcement says so
    assert "`n` int(11) NOT NULL DEFAULT 7" in target.execute("SHOW CREATE TABLE m.t")[0][1]
    pending = target.execute("SELECT source, file, start, gtid FROM "
                             "mysqlbackup_replay.pending_ddl")
    assert len(pending) == 1
    target.execute("DELETE FROM mysqlbackup_replay.pending_ddl")
    with pytest.raises(ApplyError, match="Duplicate column name 'n'"):
        run_replay(opts, TargetApplier(spec, merge=8), spark=spark)  # without it: refused
    # a DDL the target refused did not run: its announcement is withdrawn
    assert target.execute("SELECT COUNT(*) FROM mysqlbackup_replay.pending_ddl")[0][0] == 0
    target.execute("INSERT INTO mysqlbackup_replay.pending_ddl (source, file, start, gtid) "
                   "VALUES ('%s', '%s', %d, '%s')" % pending[0])
    summary = run_replay(opts, TargetApplier(spec, merge=8), spark=spark)
    assert summary.applied == 1 + 1 + 1 + 30 + 1  # the ALTER recorded, then the rest
    assert {t: target.execute(f"CHECKSUM TABLE {t}")[0][1] for t in TABLES} == \
        merged_source["checksums"]
    assert target.execute("SELECT COUNT(*) FROM mysqlbackup_replay.pending_ddl")[0][0] == 0


def test_a_table_filter_keeps_each_row_statement_whole(make_server, spark, tmp_path):
    """A trigger writes m2.audit inside the statements on m2.orders; filtering audit out
    drops the rows event that ends those statements: the kept one must take the flag,
    or the server skips the later statements of the same BINLOG without a word."""
    source = make_server(semi_sync=False)
    schema = ["CREATE DATABASE m2", "CREATE TABLE m2.orders (id INT PRIMARY KEY)",
              "CREATE TABLE m2.audit (id INT PRIMARY KEY AUTO_INCREMENT, o INT)",
              "CREATE TABLE m2.t (id INT PRIMARY KEY)"]
    source.execute(*schema, "CREATE TRIGGER m2.tr AFTER INSERT ON m2.orders FOR EACH ROW "
                   "INSERT INTO m2.audit (o) VALUES (NEW.id)")
    start = source.execute("SELECT @@gtid_binlog_pos")[0][0]
    source.execute("INSERT INTO m2.orders VALUES (1)")
    transaction(source, "INSERT INTO m2.orders VALUES (5)", "INSERT INTO m2.t VALUES (1)")
    source.execute("INSERT INTO m2.t VALUES (2)", "INSERT INTO m2.orders VALUES (2)",
                   "INSERT INTO m2.t VALUES (3)", "FLUSH BINARY LOGS")
    local = backup_dir([source.binlog_path(n) for n in source.binlog_files()],
                       tmp_path / "local", "filter1")
    url = f"file://{tmp_path / 'archive'}"
    Archiver(str(local), ArchiveStore(url)).run_once()
    selection = build_selection(start_gtid=start, tables=["m2.orders", "m2.t"])
    for server_id, merge in ((20, 1), (21, 100)):
        target = make_server(server_id=server_id, semi_sync=False, log_bin=False)
        target.execute(*schema)
        spec = SourceSpec("127.0.0.1", target.port, "root", "")
        summary = run_replay(ReplayOptions(url, {}, selection=selection),
                             TargetApplier(spec, merge=merge), spark=spark)
        assert summary.applied == 5
        assert target.execute("SELECT id FROM m2.orders ORDER BY id") == ((1,), (2,), (5,))
        assert target.execute("SELECT id FROM m2.t ORDER BY id") == ((1,), (2,), (3,)), merge
        assert target.execute("SELECT COUNT(*) FROM m2.audit")[0][0] == 0
