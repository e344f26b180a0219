"""Applying on real servers: parallel commit groups, and statements in their source session."""

import threading
import time

from mysqlbackup.stream.archiver import Archiver
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.source.spec import SourceSpec
from replay.job.decoding.assemble import assemble
from replay.job.decoding.groups import batches
from replay.job.decoding.transaction import Transaction
from replay.planning.plan import ReplayOptions
from replay.job.run import run_replay
from replay.planning.options import build_selection
from replay.job.sinks.target import TargetApplier
from tests.helpers import backup_dir, read

TABLES = ["par.a", "par.b"]


def trx(n, group):
    return Transaction("b.000001", 4, 50, gtid=f"0-1-{n}", group=group)


def test_batches_follow_mariadb_commit_ids():
    txs = [trx(1, None), trx(2, ("mariadb", 0, 7)), trx(3, ("mariadb", 0, 7)),
           trx(4, ("mariadb", 0, 9)), trx(5, ("mariadb", 1, 9)), trx(6, None), trx(7, None)]
    assert [[t.gtid for t in b] for b in batches(txs)] == [
        ["0-1-1"], ["0-1-2", "0-1-3"], ["0-1-4"], ["0-1-5"], ["0-1-6"], ["0-1-7"]]


def test_batches_follow_the_mysql_logical_clock():
    # (last_committed, sequence_number): 2 and 3 wait only for 1; 4 waits for 3
    txs = [trx(1, ("mysql", 0, 1)), trx(2, ("mysql", 1, 2)), trx(3, ("mysql", 1, 3)),
           trx(4, ("mysql", 3, 4)), trx(5, ("mysql", 3, 5))]
    assert [[t.gtid for t in b] for b in batches(txs)] == [
        ["0-1-1"], ["0-1-2", "0-1-3"], ["0-1-4", "0-1-5"]]


def concurrent_writes(server, clients=4, per_client=40):
    """Single-row transactions from several clients at once: the binlog groups them."""
    def work(c):
        conn = server.root()
        with conn.cursor() as cur:
            for i in range(per_client):
                key = c * 1000 + i
                cur.execute(f"INSERT INTO par.a VALUES ({key}, {i})")
                if i % 4 == 3:
                    cur.execute(f"UPDATE par.a SET v = v + 100 WHERE id = {key - 2}")
                    cur.execute(f"INSERT INTO par.b (note) VALUES ('client {c} row {i}')")
        conn.close()
    threads = [threading.Thread(target=work, args=(c,)) for c in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)


def checksums(server):
    return {t: server.execute(f"CHECKSUM TABLE {t}")[0][1] for t in TABLES}


def test_group_commits_apply_in_parallel_and_in_order(make_server, spark, tmp_path):
    source = make_server(semi_sync=False)
    schema = ["CREATE DATABASE par", "CREATE TABLE par.a (id INT PRIMARY KEY, v INT)",
              "CREATE TABLE par.b (id INT PRIMARY KEY AUTO_INCREMENT, note VARCHAR(40))"]
    source.execute(*schema)
    start = source.execute("SELECT @@gtid_binlog_pos")[0][0]
    # group commit waits a little for more commits: larger groups, as on a busy primary
    source.execute("SET GLOBAL binlog_commit_wait_count = 4",
                   "SET GLOBAL binlog_commit_wait_usec = 100000")
    concurrent_writes(source)
    source.execute("FLUSH BINARY LOGS")
    paths = [source.binlog_path(n) for n in source.binlog_files()]
    grouped = [t for p in paths for t in assemble(read(p), p)[0] if t.group]
    assert len(grouped) > 20, "the source did not group its commits"

    local = backup_dir(paths, tmp_path / "local", "par1")
    url = f"file://{tmp_path / 'archive'}"
    Archiver(str(local), ArchiveStore(url)).run_once()
    target = make_server(server_id=5, semi_sync=False)  # binlog + gtid_strict_mode on
    target.execute("SET SESSION sql_log_bin = 0", *schema)
    spec = SourceSpec("127.0.0.1", target.port, "root", "")
    opts = ReplayOptions(url, {}, selection=build_selection(start_gtid=start))
    summary = run_replay(opts, TargetApplier(spec, workers=4), spark=spark)
    assert summary.applied == 4 * 40 + 4 * 10 * 2
    assert summary.workers > 1 and summary.parallel_applied > 20
    assert checksums(target) == checksums(source)
    # strict mode took every GTID in order, and the target logged the source's own GTIDs
    assert target.execute("SELECT @@gtid_binlog_pos")[0][0] == \
        source.execute("SELECT @@gtid_binlog_pos")[0][0]
    again = run_replay(opts, TargetApplier(spec, workers=4), spark=spark)
    assert again.applied == 0
    assert again.skipped == summary.skipped + summary.applied


def test_statements_run_in_the_source_session(make_server, spark, tmp_path):
    """DDL runs under its source's sql_mode, character set and timestamp."""
    source = make_server(semi_sync=False)
    source.execute("CREATE DATABASE s")
    start = source.execute("SELECT @@gtid_binlog_pos")[0][0]
    conn = source.root(charset="latin1")
    with conn.cursor() as cur:
        cur.execute("SET SESSION sql_mode = 'ANSI_QUOTES'")  # "id" is a name, not a string
        cur.execute('CREATE TABLE s."quoted" ("id" INT PRIMARY KEY, "v" VARCHAR(10) '
                    "DEFAULT 'caf\u00e9')")  # sent as latin1 bytes
        cur.execute("SET SESSION sql_mode = DEFAULT")
        cur.execute("INSERT INTO s.quoted (id) VALUES (1), (2)")
    conn.close()
    time.sleep(1.2)  # the ALTER fills ts with its own time: replay must not use its own
    source.execute("ALTER TABLE s.quoted ADD COLUMN ts TIMESTAMP(6) NOT NULL "
                   "DEFAULT CURRENT_TIMESTAMP(6)")
    source.execute("FLUSH BINARY LOGS")
    local = backup_dir([source.binlog_path(n) for n in source.binlog_files()],
                       tmp_path / "local", "sess1")
    url = f"file://{tmp_path / 'archive'}"
    Archiver(str(local), ArchiveStore(url)).run_once()
    target = make_server(server_id=6, semi_sync=False)
    target.execute("SET SESSION sql_log_bin = 0", "CREATE DATABASE s")
    spec = SourceSpec("127.0.0.1", target.port, "root", "")
    time.sleep(1.2)
    summary = run_replay(ReplayOptions(url, {}, selection=build_selection(start_gtid=start)),
                         TargetApplier(spec), spark=spark)
    assert summary.applied == 3
    show = "SHOW CREATE TABLE s.quoted"
    assert target.execute(show) == source.execute(show)
    assert "'caf\u00e9'" in source.execute(show)[0][1]
    rows = "SELECT id, v, ts FROM s.quoted ORDER BY id"
    assert target.execute(rows) == source.execute(rows)
