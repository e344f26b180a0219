"""The disaster drill, end to end on real servers: archive -> dump -> DROP -> replay."""

import re
import signal
import subprocess
import sys
import time

import pytest

from mysqlbackup.archive.options import parse_options
from mysqlbackup.archive.store import ArchiveStore
from mysqlbackup.errors import UsageError
from mysqlbackup.source.spec import SourceSpec
from replay.planning.plan import ReplayOptions
from replay.job.run import run_replay
from replay.job.sinks.sqlfile import SqlFileSink
from replay.job.sinks.target import TargetApplier
from tests.helpers import (Daemon, REPO, backup_dir, cli_env, run_cli, selection_of,
                           wait_archived_to_the_end, wait_for)

TABLES = ["shop.customers", "shop.orders", "shop.ledger", "crm.notes"]


def workload(server, round_):
    """Inserts, updates, deletes over several tables; the first round also creates them."""
    if round_ == 0:
        server.execute(
            "CREATE DATABASE shop", "CREATE DATABASE crm",
            "CREATE TABLE shop.customers (id INT PRIMARY KEY, name VARCHAR(40), vip TINYINT)",
            "CREATE TABLE shop.orders (id INT PRIMARY KEY AUTO_INCREMENT, customer INT, "
            "item VARCHAR(40), qty INT, price DECIMAL(10,2))",
            "CREATE TABLE shop.ledger (id BIGINT PRIMARY KEY AUTO_INCREMENT, amount "
            "DECIMAL(12,2), note TEXT)",
            "CREATE TABLE crm.notes (id INT PRIMARY KEY AUTO_INCREMENT, body TEXT)")
    base = round_ * 100
    conn = server.root(autocommit=False)
    with conn.cursor() as cur:
        for i in range(base, base + 60):
            cur.execute("INSERT INTO shop.customers VALUES (%s, %s, %s)", (i, f"c{i}", i % 2))
            cur.execute("INSERT INTO shop.orders (customer, item, qty, price) VALUES "
                        "(%s, %s, %s, %s)", (i, f"item{i}", i % 7, i * 1.25))
            if i % 3 == 0:
                cur.execute("INSERT INTO crm.notes (body) VALUES (%s)", (f"note {i}" * 3,))
            conn.commit()
        cur.execute("UPDATE shop.orders SET qty = qty + 1 WHERE id % 4 = 0")
        cur.execute("DELETE FROM shop.customers WHERE id % 10 = 5")
        conn.commit()
        if server.execute("SHOW TABLES FROM shop LIKE 'ledger'"):
            cur.execute("INSERT INTO shop.ledger (amount, note) VALUES (10.5, 'a'), "
                        "(-3.25, 'b')")
            conn.commit()
    conn.close()
    if round_ == 1:
        server.execute("ALTER TABLE shop.orders ADD COLUMN shipped TINYINT DEFAULT 0")
    server.execute("FLUSH BINARY LOGS")


def checksums(server, tables=TABLES):
    out = {}
    for t in tables:
        try:
            out[t] = server.execute(f"CHECKSUM TABLE {t}")[0][1]
        except Exception:  # noqa: BLE001 - a dropped table has no checksum
            out[t] = None
    return out


def dump(server):
    result = subprocess.run(
        ["mariadb-dump", "--no-defaults", f"--socket={server.socket}", "-uroot",
         "--single-transaction", "--gtid", "--master-data=2", "--databases", "shop", "crm"],
        capture_output=True, text=True, check=True)
    gtid = re.search(r"gtid_slave_pos='([^']*)'", result.stdout).group(1)
    return result.stdout, gtid


def restore(target, sql):
    subprocess.run(["mariadb", "--no-defaults", f"--socket={target.socket}", "-uroot",
                    "--init-command=SET SESSION sql_log_bin=0"], input=sql, text=True,
                   check=True)


@pytest.fixture(scope="module")
def drill(tmp_path_factory, s3):
    """Primary + daemon archiving to S3; dump at G0; the DROP at T; writes after it."""
    from mysqlbackup.sandbox import MariaDBSandbox
    base = tmp_path_factory.mktemp("drill")
    primary = MariaDBSandbox(str(base / "primary"), semi_sync_timeout_ms=1000).start()
    url = s3.bucket("drill")
    options = [f"endpoint_url={s3.endpoint}"]
    daemon = Daemon(primary, base / "backup", "--archive", url, "--archive-interval", "0.3",
                    "--source-name", "db1", *[f"--archive-option={o}" for o in options]).start()
    try:
        workload(primary, 0)
        dump_sql, g0 = dump(primary)
        workload(primary, 1)
        time.sleep(1.1)  # the DROP in a second of its own, for --stop-datetime
        before_drop = checksums(primary)
        conn = primary.root()
        with conn.cursor() as cur:
            # the second the DROP starts in (after it, UNIX_TIMESTAMP() may already be in
            # the next one, where a --stop-datetime would keep the DROP)
            cur.execute("SELECT UNIX_TIMESTAMP()")
            drop_time = cur.fetchone()[0]
            cur.execute("DROP TABLE shop.ledger")
            cur.execute("SELECT @@last_gtid")
            drop_gtid = cur.fetchone()[0]
        conn.close()
        workload(primary, 2)
        primary.execute(*[f"INSERT INTO crm.notes (body) VALUES ('after {i}')" for i in range(5)])
        final = checksums(primary)
        store = ArchiveStore(url, parse_options(options))
        wait_archived_to_the_end(primary, store)
    finally:
        assert daemon.stop() == 0, daemon.output()
    yield {"primary": primary, "url": url, "options": parse_options(options), "dump": dump_sql,
           "g0": g0, "drop_gtid": drop_gtid, "drop_time": drop_time,
           "before_drop": before_drop, "final": final, "base": base, "cli_options": options}
    primary.stop(remove=True)


def target_server(make_server, drill, log_bin=True):
    target = make_server(server_id=3, semi_sync=False, log_bin=log_bin)
    restore(target, drill["dump"])
    return target


def replay_into_new_target(drill, make_server, spark, **selection):
    """Restore the dump into a new server, replay the archive onto it: (target, summary)."""
    target = target_server(make_server, drill)
    sel = selection_of(start_gtid=drill["g0"], **selection)
    spec = SourceSpec("127.0.0.1", target.port, "root", "")
    summary = run_replay(ReplayOptions(drill["url"], drill["options"], selection=sel),
                         TargetApplier(spec), spark=spark)
    return target, summary


def test_replay_to_just_before_the_drop(drill, make_server, spark):
    target, summary = replay_into_new_target(drill, make_server, spark,
                                             stop_before_gtid=drill["drop_gtid"])
    assert summary.stop_reason == f"stop before GTID {drill['drop_gtid']}"
    # one task per decoded file; at most one window (one file a core) past the stop
    assert summary.spark_tasks == summary.tasks <= summary.files
    assert summary.applied > 60  # files wholly inside G0 are not even read
    assert checksums(target) == drill["before_drop"]


def test_replay_by_datetime_in_another_zone(drill, make_server, spark):
    from datetime import datetime, timedelta, timezone
    stop = datetime.fromtimestamp(drill["drop_time"], timezone(timedelta(hours=2)))
    target, summary = replay_into_new_target(drill, make_server, spark,
                                             stop_datetime=stop.isoformat())
    assert summary.stop_reason == "stop datetime reached"
    assert checksums(target) == drill["before_drop"]


def test_replay_excluding_the_drop_and_going_on(drill, make_server, spark):
    target, summary = replay_into_new_target(drill, make_server, spark,
                                             exclude_gtids=drill["drop_gtid"])
    assert summary.stop_reason == "end of the archive"
    assert summary.spark_tasks == summary.tasks == summary.files  # one task a file
    expected = dict(drill["final"], **{"shop.ledger": drill["before_drop"]["shop.ledger"]})
    assert checksums(target) == expected
    # the target is past the DROP now: a replay to just before it cannot go back
    sel = selection_of(start_gtid=drill["g0"], stop_before_gtid=drill["drop_gtid"])
    spec = SourceSpec("127.0.0.1", target.port, "root", "")
    with pytest.raises(UsageError, match=re.escape(
            f"the target already has transaction {drill['drop_gtid']} ending at ")) as error:
        run_replay(ReplayOptions(drill["url"], drill["options"], selection=sel),
                   TargetApplier(spec), spark=spark)
    assert str(error.value).endswith(f", past the stop point (stop before GTID "
                                     f"{drill['drop_gtid']}): a replay cannot go back; restore "
                                     "into a new server")
    assert checksums(target) == expected


@pytest.mark.parametrize("log_bin", [True, False], ids=["target-binlog", "checkpoint-only"])
def test_killed_replay_rerun_gives_the_same_state(drill, make_server, spark, log_bin):
    # with a binlog the target's GTID state says what is applied; without one, only the
    # checkpoint row written inside each applied transaction does. The killed replay is
    # a process (kill -9); the one run again, the same command in this process
    target = target_server(make_server, drill, log_bin)
    args = [sys.executable, "-m", "mysqlbackup", "replay", "--archive", drill["url"],
            *[f"--archive-option={o}" for o in drill["cli_options"]], "--target",
            f"mysql://root@127.0.0.1:{target.port}", "--start-gtid", drill["g0"],
            "--stop-before-gtid", drill["drop_gtid"]]
    env = cli_env(password="")
    proc = subprocess.Popen(args, env=env, cwd=REPO, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)

    def some_applied():
        rows = target.execute("SELECT COUNT(*) FROM information_schema.tables WHERE "
                              "table_schema='mysqlbackup_replay'")
        return rows[0][0] and target.execute(
            "SELECT COUNT(*) FROM mysqlbackup_replay.checkpoint")[0][0]
    wait_for(some_applied, timeout=120, interval=0.01, what="the replay to start applying")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    rerun = run_cli(*args[3:], password="")
    assert rerun.returncode == 0, rerun.stdout + rerun.stderr
    assert "stopped: stop before GTID" in rerun.stdout
    assert re.search(r"^target: \d+ transactions in \d+ commits; workers: \d+ connection",
                     rerun.stdout, re.M), rerun.stdout
    assert checksums(target) == drill["before_drop"]


def test_sql_sink_of_a_truncated_newest_file_keeps_complete_transactions(drill, tmp_path,
                                                                          spark):
    store = ArchiveStore(drill["url"], drill["options"])
    segments = sorted(k for k in store.list("db1/partial") if not k.endswith(".json"))
    last = segments[-1]
    data = store.read(last)
    store.put_bytes(last, data[:-10])  # the newest file ends inside its last transaction
    try:
        out = tmp_path / "replay.sql"
        sel = selection_of(start_gtid=drill["g0"])
        summary = run_replay(ReplayOptions(drill["url"], drill["options"], selection=sel,
                                           allow_gaps=True), SqlFileSink(str(out)), spark=spark)
    finally:
        store.put_bytes(last, data)
    assert len(summary.dropped_incomplete) == 1
    assert summary.stop_reason == "end of the archive"
    text = out.read_text()
    assert text.count("BEGIN\n/*!*/;") == text.count("COMMIT\n/*!*/;") > 0
    newest = last.split("/")[2]
    # five single-row transactions went into the newest file; the cut fifth is left out
    assert len(re.findall(rf"^-- 0-1-\d+ {re.escape(newest)}:", text, re.M)) == 4


def test_rewrite_db_applies_into_another_schema(make_server, spark, tmp_path):
    from mysqlbackup.stream.archiver import Archiver
    source = make_server(semi_sync=False)
    ddl = "CREATE TABLE {}.t (id INT PRIMARY KEY, v VARCHAR(20))"
    source.execute("CREATE DATABASE src", ddl.format("src"))
    start = source.execute("SELECT @@gtid_binlog_pos")[0][0]
    source.execute(*[f"INSERT INTO src.t VALUES ({i}, 'v{i}')" for i in range(50)],
                   "UPDATE src.t SET v = 'changed' WHERE id % 3 = 0",
                   "DELETE FROM src.t WHERE id % 7 = 0")
    local = backup_dir([source.binlog_path(n) for n in source.binlog_files()],
                       tmp_path / "local", "src1")
    url = f"file://{tmp_path / 'archive'}"
    Archiver(str(local), ArchiveStore(url)).run_once()
    target = make_server(server_id=4, semi_sync=False)
    target.execute("CREATE DATABASE dst", ddl.format("dst"))
    sel = selection_of(start_gtid=start, rewrites=["src:dst"])
    spec = SourceSpec("127.0.0.1", target.port, "root", "")
    summary = run_replay(ReplayOptions(url, {}, selection=sel), TargetApplier(spec),
                         spark=spark)
    assert summary.applied == 52
    assert target.execute("CHECKSUM TABLE dst.t")[0][1] == \
        source.execute("CHECKSUM TABLE src.t")[0][1]
    assert not target.execute("SHOW DATABASES LIKE 'src'")
