"""The tool against a live MySQL server (9.7, Debian sid's, run through chroot from
.mysql/tree: sandbox.mysql), as against MariaDB: semi-sync streaming with byte-identical
files and a kill -9 resume, the archive verified and listed, replay --sql, tagged GTIDs
end to end, and a failover to a promoted replica followed in the same directory."""

import datetime
import json
import os
import re
import subprocess

from mysqlbackup.binlog.gtid import MysqlGtidSet
from tests.helpers import (Daemon, caught_up, current_binlog, read, run_cli, tagged,
                           same_except_in_use_flag, wait_for, wait_semi_sync_source)


def gtid_executed(server):
    return server.execute("SELECT @@gtid_executed")[0][0].replace("\n", "")


def inserts(first, count, table="d.t"):
    return [f"INSERT INTO {table} (v) VALUES ({i})" for i in range(first, first + count)]


def durable_gtid(daemon, server):
    """True when the daemon's checkpoint holds the server's whole gtid_executed."""
    return (daemon.status().get("state") or {}).get("gtid") == gtid_executed(server)


def last_of(server, tag=None):
    """The GTID of the server's own last transaction (UUID:N, or UUID:TAG:N)."""
    uuid = server.execute("SELECT @@server_uuid")[0][0]
    sid = f"{uuid}:{tag}" if tag else uuid
    return f"{sid}:{MysqlGtidSet.parse(gtid_executed(server)).sids[sid][-1][1] - 1}"


def archived_last(url):
    """The last GTID of the archive's newest file (None when unreadable or empty)."""
    out = run_cli("archive", "ls", "--archive", url, "--json")
    files = json.loads(out.stdout)["files"] if out.returncode == 0 else []
    return files[-1]["last_gtid"] if files else None


def sql_gtids(path):
    """The GTID of each transaction of a ``replay --sql`` file, in order."""
    with open(path) as f:
        return [m[1] for m in re.finditer(r"^-- (\S+:\S+) \S+:\d+-\d+$", f.read(), re.M)]


def test_semi_sync_byte_identical_files_and_a_kill9_resume(make_mysql, tmp_path):
    server = make_mysql()
    server.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v INT)")
    first = server.binlog_files()[0]
    directory = tmp_path / "dir"
    daemon = Daemon(server, directory, "--start-file", first).start()
    try:
        wait_semi_sync_source(server)
        acked = int(server.status("Rpl_semi_sync_source_yes_tx"))
        server.execute(*inserts(0, 50))
        assert int(server.status("Rpl_semi_sync_source_yes_tx")) - acked == 50, \
            server.status("Rpl_semi_sync_source_no_tx")
        server.execute("FLUSH BINARY LOGS", *inserts(50, 20))
        wait_for(lambda: caught_up(server, directory), what="catch-up")
    finally:
        daemon.kill9()
    server.execute(*inserts(70, 30))
    daemon = Daemon(server, directory).start()
    try:
        server.execute(*inserts(100, 10))
        wait_for(lambda: caught_up(server, directory), what="catch-up after kill -9")
    finally:
        assert daemon.stop() == 0, daemon.output()
    for name in server.binlog_files():
        local = os.path.join(directory, name)
        if name == current_binlog(server):
            assert same_except_in_use_flag(local, server.binlog_path(name)), name
        else:
            assert read(local) == read(server.binlog_path(name)), name


def test_archive_verify_ls_and_replay_sql(make_mysql, tmp_path):
    server = make_mysql()
    server.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v INT)", *inserts(0, 20), "FLUSH BINARY LOGS",
                   *inserts(20, 5))
    first = server.binlog_files()[0]
    start = "%s:%s" % server.execute("SHOW BINARY LOG STATUS")[0][:2]
    server.execute(*inserts(25, 15))
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(server, tmp_path / "dir", "--start-file", server.binlog_files()[0],
                    "--archive", url, "--archive-interval", "0.2", "--source-name",
                    "my1").start()
    try:
        wait_for(lambda: archived_last(url) == last_of(server),
                 what="the archive up to the last transaction")
    finally:
        assert daemon.stop() == 0, daemon.output()
    verified = run_cli("verify", "--archive", url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = run_cli("archive", "ls", "--archive", url)
    assert listed.returncode == 0, listed.stderr
    sql = tmp_path / "review.sql"
    replay = run_cli("replay", "--archive", url, "--sql", str(sql), timeout=300)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    gtids = sql_gtids(sql)
    assert len(gtids) == len(set(gtids)) == 1 + 1 + 40  # CREATE DATABASE, TABLE, 40 rows
    # the file applies with MySQL's own client: the rows and the GTIDs are the source's
    from mysqlbackup.sandbox.mysql import client_wrappers
    target = make_mysql(server_id=7, semi_sync=False)
    with open(sql, "rb") as f:
        loaded = subprocess.run([os.path.join(client_wrappers(tmp_path / "bin"), "mysql"),
                                 "-h127.0.0.1", f"-P{target.port}", "-uroot"], stdin=f,
                                capture_output=True, timeout=120)
    assert loaded.returncode == 0, loaded.stderr
    assert checksum(target) == checksum(server)
    assert gtid_executed(target) == gtid_executed(server)
    # --start-position: the files before its own are never read (the first one's archived
    # bytes spoiled in place, same size, go unnoticed); its own is read from its start
    sealed = tmp_path / "archive" / "my1" / "binlog"
    spoiled, = [p for p in sealed.iterdir() if p.name.startswith(first)
                and not p.name.endswith(".json")]
    data = bytearray(spoiled.read_bytes())
    data[len(data) // 2:] = bytes(len(data) - len(data) // 2)
    spoiled.write_bytes(bytes(data))
    later = tmp_path / "later.sql"
    replay = run_cli("replay", "--archive", url, "--sql", str(later), "--start-position",
                     start, timeout=300)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert sql_gtids(later) == gtids[-15:]
    whole = run_cli("replay", "--archive", url, "--sql", str(tmp_path / "x.sql"))
    assert whole.returncode == 6 and first in whole.stderr, whole.stderr


def test_a_failover_to_a_promoted_replica_on_mysql(make_mysql, tmp_path):
    """MySQL's failover, followed in the same directory: A primary, B its replica
    (log_replica_updates, MySQL's default; the same binlog names), the daemon on A with
    --follow-by-gtid; A killed, B promoted (STOP REPLICA; RESET REPLICA ALL), the daemon
    started again on B: epoch 2 in the archive, verify exits 0, archive ls shows one
    window and the failover, replay --sql holds every transaction of B's gtid_executed
    exactly once (B's copies of A's transactions skipped), and restores from A's base
    across the switch (to just before a DELETE on B, and to the end) equal B then."""
    from mysqlbackup.sandbox.mysql import client_wrappers
    path = str(client_wrappers(tmp_path / "bin")) + os.pathsep + os.environ["PATH"]
    a = make_mysql(server_id=1)
    b = make_mysql(server_id=2, semi_sync=False)
    b.replicate_from(a)
    url, directory = f"file://{tmp_path / 'archive'}", tmp_path / "dir"
    options = ("--archive", url, "--archive-interval", "0.2", "--source-name", "my1",
               "--follow-by-gtid")
    daemon = Daemon(a, directory, "--start-file", a.binlog_files()[0], *options).start()
    try:
        wait_for(lambda: a.status("Rpl_semi_sync_source_clients") == "1", 30,
                 what="the daemon as A's semi-sync replica")
        a.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY "
                  "AUTO_INCREMENT, v INT)", *inserts(0, 20))
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{a.port}", "--archive",
                       url, "--source-name", "my1", password="", timeout=120, path=path)
        assert base.returncode == 0, base.stdout + base.stderr
        a.execute("FLUSH BINARY LOGS", *inserts(20, 7))
        tagged(a, *inserts(27, 3), tag="nightly")  # the checkpoint the daemon follows: tagged
        wait_for(lambda: gtid_executed(b) == gtid_executed(a), what="B to catch up")
        wait_for(lambda: durable_gtid(daemon, a), what="the daemon durable on A")
    finally:
        assert daemon.stop() == 0, daemon.output()
    a.proc.kill()
    a.proc.wait()
    b.execute("STOP REPLICA", "RESET REPLICA ALL")
    daemon = Daemon(b, directory, *options).start()
    try:
        wait_for(lambda: (daemon.status().get("state") or {}).get("epoch") == 2,
                 what="the daemon on B, epoch 2")
        b.execute("FLUSH BINARY LOGS", *inserts(100, 13))
        before_delete = checksum(b)
        b.execute("DELETE FROM d.t WHERE v < 5")
        delete = last_of(b)
        tagged(b, *inserts(113, 2), tag="nightly")
        wait_for(lambda: durable_gtid(daemon, b), what="the daemon durable on B")
        end = b.execute("SELECT COUNT(*) FROM d.t")[0][0]
        wait_for(lambda: archived_last(url) == last_of(b, "nightly"),
                 what="the archive at B's last")
    finally:
        assert daemon.stop() == 0, daemon.output()
    assert os.path.isdir(directory / "epoch" / "2")
    verified = run_cli("verify", "--archive", url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    summary = json.loads(run_cli("archive", "ls", "--archive", url, "--json").stdout)
    assert summary["holes"] == [] and summary["problems"] == [], summary
    [failover] = summary["failovers"]
    assert (failover["epoch"], failover["server_id"]) == (2, 2)
    sql = tmp_path / "all.sql"
    replay = run_cli("replay", "--archive", url, "--sql", str(sql), timeout=300)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    gtids = sql_gtids(sql)
    assert len(gtids) == len(set(gtids)), "a transaction replayed twice"
    assert len(gtids) == 2 + 30 + 15 + 1 and end == 40
    for stop, rows in ((("--stop-before-gtid", delete), before_delete), ((), checksum(b))):
        target = make_mysql(server_id=30 + len(stop), semi_sync=False)
        done = run_cli("restore", "--archive", url, "--source-name", "my1", "--target",
                       f"mysql://root@127.0.0.1:{target.port}", *stop, password="",
                       timeout=300, path=path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert checksum(target) == rows, done.stdout


def test_tagged_gtids_end_to_end(make_mysql, tmp_path):
    """GTIDs tagged with SET gtid_next = 'AUTOMATIC:TAG' (MySQL 8.4+) are tracked like any
    other: the checkpoint holds them at once (MySQL's own text of gtid_executed), verify
    and archive ls take them, replay --sql holds each, and --start-gtid with a tagged set
    starts where the server says."""
    server = make_mysql()
    server.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v INT)")
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(server, tmp_path / "dir", "--start-file", server.binlog_files()[0],
                    "--archive", url, "--archive-interval", "0.2").start()
    try:
        wait_for(lambda: server.status("Rpl_semi_sync_source_clients") == "1", 30,
                 what="the daemon as a semi-sync replica")
        server.execute(*inserts(0, 5))
        tagged(server, *inserts(5, 3), tag="nightly")
        server.execute(*inserts(8, 2))
        assert ":nightly:1-3" in gtid_executed(server)
        wait_for(lambda: durable_gtid(daemon, server), what="the checkpoint with the tags")
        wait_for(lambda: archived_last(url) == last_of(server), what="the archive")
    finally:
        assert daemon.stop() == 0, daemon.output()
    verified = run_cli("verify", "--archive", url)
    assert verified.returncode == 0, verified.stdout + verified.stderr
    listed = run_cli("archive", "ls", "--archive", url, "--json")
    assert listed.returncode == 0 and json.loads(listed.stdout)["holes"] == [], listed.stderr
    sql = tmp_path / "all.sql"
    replay = run_cli("replay", "--archive", url, "--sql", str(sql), timeout=300)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    uuid = server.execute("SELECT @@server_uuid")[0][0]
    assert [g for g in sql_gtids(sql) if ":nightly:" in g] == [
        f"{uuid}:nightly:{n}" for n in (1, 2, 3)]

    server.execute("FLUSH BINARY LOGS")
    start = gtid_executed(server)  # a set with a tag in it
    at = server.current_binlog()
    tagged(server, *inserts(10, 1), tag="nightly")
    fresh = Daemon(server, tmp_path / "from-gtid", "--start-gtid", start).start()
    try:
        wait_for(lambda: caught_up(server, tmp_path / "from-gtid"), what="catch-up")
    finally:
        assert fresh.stop() == 0, fresh.output()
    assert sorted(n for n in os.listdir(tmp_path / "from-gtid") if n.startswith("binlog.")) \
        == [at]


def checksum(server, table="d.t"):
    return server.execute(f"CHECKSUM TABLE {table}")[0][1]


def test_replay_into_a_mysql_target_keeps_the_gtids_and_applies_once(make_mysql, tmp_path):
    """replay --target into an empty MySQL server: the rows equal the source's, each
    transaction under its original GTID (tagged ones included), so the target's
    gtid_executed is the source's; run again it applies nothing; stopped before a
    GTID, the target holds exactly what came before it."""
    source = make_mysql()
    source.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v INT, s VARCHAR(20))")
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(source, tmp_path / "dir", "--start-file", source.binlog_files()[0],
                    "--archive", url, "--archive-interval", "0.2").start()
    try:
        wait_for(lambda: source.status("Rpl_semi_sync_source_clients") == "1", 30,
                 what="the daemon as a semi-sync replica")
        source.execute(*inserts(0, 10), "UPDATE d.t SET s = 'x' WHERE v % 3 = 0")
        tagged(source, *inserts(10, 3), tag="nightly")
        at_stop = checksum(source)
        source.execute("DELETE FROM d.t WHERE v < 4")
        stop = last_of(source)  # the DELETE's GTID: a restore stops before it
        source.execute("CREATE TABLE d.u (a INT PRIMARY KEY)", "INSERT INTO d.u VALUES (1)",
                       *inserts(20, 5))
        wait_for(lambda: archived_last(url) == last_of(source), what="the archive")
    finally:
        assert daemon.stop() == 0, daemon.output()
    target = make_mysql(server_id=9, semi_sync=False)
    spec = f"mysql://root@127.0.0.1:{target.port}"
    done = run_cli("replay", "--archive", url, "--target", spec, password="", timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert (checksum(target), checksum(target, "d.u")) == (checksum(source),
                                                          checksum(source, "d.u"))
    assert gtid_executed(target) == gtid_executed(source)
    again = run_cli("replay", "--archive", url, "--target", spec, password="", timeout=300)
    assert again.returncode == 0 and gtid_executed(target) == gtid_executed(source), again.stderr
    before = make_mysql(server_id=10, semi_sync=False)
    cut = run_cli("replay", "--archive", url, "--target",
                  f"mysql://root@127.0.0.1:{before.port}", "--stop-before-gtid", stop,
                  password="", timeout=300)
    assert cut.returncode == 0, cut.stdout + cut.stderr
    assert checksum(before) == at_stop
    sid, gno = stop.rsplit(":", 1)
    held = MysqlGtidSet.parse(gtid_executed(before))
    assert not held.contains(sid, int(gno)) and held.contains(sid, int(gno) - 1)


def next_second(server):
    """The server clock's next whole second (ISO 8601, UTC), once the clock has reached
    it: what commits from now on commits at or after it, what committed before, before."""
    now = server.execute("SELECT UNIX_TIMESTAMP()")[0][0]
    wait_for(lambda: server.execute("SELECT UNIX_TIMESTAMP()")[0][0] > now, timeout=5,
             what="the server's clock to reach the next second")
    return datetime.datetime.fromtimestamp(now + 1, datetime.timezone.utc).strftime(
        "%Y-%m-%dT%H:%M:%SZ")


def test_restore_into_an_empty_mysql_server(make_mysql, tmp_path):
    """base (MySQL's mysqldump) + binlogs, restored into an empty MySQL server: to just
    before a bad DELETE (named by its GTID, by a datetime, by a position) and to the end,
    each equal to the source then (CHECKSUM TABLE), the target's gtid_executed the
    source's at that moment; ``drill`` restores it into a scratch mysqld of its own and
    finds every GTID applied once."""
    from mysqlbackup.sandbox.mysql import client_wrappers
    path = str(client_wrappers(tmp_path / "bin")) + os.pathsep + os.environ["PATH"]
    source = make_mysql()
    source.execute("CREATE DATABASE d", "CREATE TABLE d.t (id INT PRIMARY KEY "
                   "AUTO_INCREMENT, v INT, s VARCHAR(20))", *inserts(0, 20))
    url = f"file://{tmp_path / 'archive'}"
    daemon = Daemon(source, tmp_path / "dir", "--start-file", source.binlog_files()[0],
                    "--archive", url, "--archive-interval", "0.2", "--source-name",
                    "my1").start()
    try:
        wait_for(lambda: source.status("Rpl_semi_sync_source_clients") == "1", 30,
                 what="the daemon as a semi-sync replica")
        base = run_cli("base", "--source", f"mysql://root@127.0.0.1:{source.port}",
                       "--archive", url, "--source-name", "my1", password="",
                       timeout=120, path=path)
        assert base.returncode == 0, base.stdout + base.stderr
        source.execute(*inserts(20, 10), "FLUSH BINARY LOGS", "UPDATE d.t SET s = 'y'")
        tagged(source, *inserts(30, 2), tag="nightly")
        before, gtids_before = checksum(source), gtid_executed(source)
        position = "%s:%s" % source.execute("SHOW BINARY LOG STATUS")[0][:2]
        moment = next_second(source)  # the DELETE commits at or after it, the rest before
        source.execute("DELETE FROM d.t WHERE v > 10")
        bad = last_of(source)
        source.execute(*inserts(40, 3))
        wait_for(lambda: archived_last(url) == last_of(source), what="the archive")
    finally:
        assert daemon.stop() == 0, daemon.output()
    stops = [("--stop-before-gtid", bad), ("--stop-datetime", moment),
             ("--stop-position", position), ()]
    for n, stop in enumerate(stops):
        rows, gtids = ((before, gtids_before) if stop else
                       (checksum(source), gtid_executed(source)))
        target = make_mysql(server_id=20 + n, semi_sync=False)
        done = run_cli("restore", "--archive", url, "--source-name", "my1", "--target",
                       f"mysql://root@127.0.0.1:{target.port}", *stop, password="",
                       timeout=300, path=path)
        assert done.returncode == 0, done.stdout + done.stderr
        assert checksum(target) == rows, done.stdout
        assert gtid_executed(target) == gtids, done.stdout
    from mysqlbackup.sandbox.mysql import private_shared_dir, server_wrapper
    server_wrapper(tmp_path / "bin")  # the drill's scratch server: MySQL's own mysqld
    with private_shared_dir() as work:  # mysqld in the chroot sees it by the same path
        drill = run_cli("drill", "--archive", url, "--source-name", "my1", "--workdir",
                        work, timeout=300, path=path)
    assert drill.returncode == 0, drill.stdout + drill.stderr
    [applied] = [line for line in drill.stdout.splitlines() if line.startswith("transactions")]
    assert applied.endswith(f"through {gtid_executed(source)} as the indexes list"), applied
